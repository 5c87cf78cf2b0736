"""Pastry nodeIds and keys: 128-bit integers read as 32 digits of base 16 (b = 4).

A broker's nodeId is the first 128 bits of the SHA-256 of its identity (its pubend id), so ids are
uniform over the ring and a restarted broker keeps its place. Keys (tree keys, join keys) live in the
same space. Routing compares ids in two ways, both here: the length of the shared prefix in digits
(the routing table's row), and the numerical distance on the ring of 2**128 ids (the leaf set and
the final hop go to the numerically closest node). On the wire an id is 16 big-endian bytes, since
msgpack integers stop at 64 bits.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.wire.packable import WireArray

ID_BITS = 128
DIGIT_BITS = 4  # b
BASE = 1 << DIGIT_BITS
DIGITS = ID_BITS // DIGIT_BITS
RING = 1 << ID_BITS
HALF_RING = RING >> 1
ID_BYTES = ID_BITS // 8
ADDRESS_CHARS_MAX = 300


def node_id_from(identity: str) -> int:
    """The nodeId (or tree key) of a name: the first 128 bits of its SHA-256."""
    return int.from_bytes(hashlib.sha256(identity.encode()).digest()[:ID_BYTES], "big")


def digit(ident: int, position: int) -> int:
    """The `position`-th base-16 digit of `ident`, most significant first."""
    return (ident >> (ID_BITS - DIGIT_BITS * (position + 1))) & (BASE - 1)


def shared_prefix_digits(a: int, b: int) -> int:
    """How many leading digits `a` and `b` share (DIGITS when equal)."""
    x = a ^ b
    if x == 0:
        return DIGITS
    return (ID_BITS - x.bit_length()) // DIGIT_BITS


def ring_distance(a: int, b: int) -> int:
    """Numerical distance on the ring of 2**128 ids (the shorter way round)."""
    d = (a - b) % RING
    return d if d <= HALF_RING else RING - d


def closer(key: int, a: int, b: int) -> bool:
    """True when `a` is numerically closer to `key` than `b`; ties go to the smaller id, so every
    node agrees on one closest node."""
    da, db = ring_distance(key, a), ring_distance(key, b)
    return da < db or (da == db and a < b)


def id_hex(ident: int) -> str:
    return f"{ident:032x}"


def id_to_wire(ident: int) -> bytes:
    return ident.to_bytes(ID_BYTES, "big")


def id_from_wire(data: object) -> int:
    if type(data) is not bytes or len(data) != ID_BYTES:
        raise ProtocolError(BAD_MESSAGE, f"a nodeId or key is {ID_BYTES} bytes")
    return int.from_bytes(data, "big")


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A node as others know it: its nodeId and the address its peers connect to (host:port)."""

    node_id: int
    address: str

    def to_wire(self) -> WireArray:
        return [id_to_wire(self.node_id), self.address]

    @staticmethod
    def from_wire(data: object) -> NodeRef:
        if type(data) is not list or len(data) != 2:
            raise ProtocolError(BAD_MESSAGE, "a node reference is [nodeId, address]")
        address = data[1]
        if type(address) is not str or not address or len(address) > ADDRESS_CHARS_MAX:
            raise ProtocolError(BAD_MESSAGE, "a node address is a non-empty string")
        return NodeRef(id_from_wire(data[0]), address)

    def __str__(self) -> str:
        return f"{id_hex(self.node_id)[:8]}@{self.address}"
