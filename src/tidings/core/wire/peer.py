"""The broker-to-broker wire: the peer handshake, RTT probes and peer errors (types 128..132).

A peer connection uses the client framing (frames.py: 4-byte length, msgpack body); each body is an
array whose first element is the message type. The dialling broker speaks first:

    PEER_HELLO   [128, version, [nodeId, address]]   the dialler's NodeRef (+ nonce, see below)
    PEER_WELCOME [129, version, [nodeId, address]]   the acceptor's NodeRef
    PING         [130, seq]                          answered at once by
    PONG         [131, seq]                          the same seq: its round trip is the RTT
    PEER_ERROR   [132, code, message]                what was wrong; the sender then closes
    PEER_CHALLENGE [133, nonce, proof]               the acceptor's nonce and cluster proof
    PEER_AUTH    [134, proof]                        the dialler's cluster proof

Versions. Each version a broker speaks adds to the one before, and an acceptor welcomes a PEER_HELLO
of any version from PEER_VERSION_MIN to its own (PEER_WELCOME then says the dialler's), so the link
speaks the dialler's version. A dialler refused with `version-mismatch` (an older acceptor, which
refuses any version but its own) dials again saying the version before, down to PEER_VERSION_MIN;
so a cluster mixing versions links every pair, each in the older one's version. What each adds:

    1   the handshake, PING/PONG, PEER_ERROR, the cluster credential; every other layer's messages
    2   a NACK may carry its fifth element, `complete` (core/reliability/messages.py): a broker
        sends complete nacks only over a link speaking 2 or later (COMPLETE_NACKS), since a
        broker of version 1 refuses a five-element NACK as malformed and closes the link;
        SHARE_MOVED and SHARE_LEFT (144, 145: core/share/handover.py), which a broker of version
        1 does not know (an unknown type closes the link), go only over a link speaking 2 or later
        (SHARE_HANDOVER)

In a cluster with a credential (core/auth/peer_auth.py) the dialler's PEER_HELLO carries a fourth
field, its nonce; the acceptor answers PEER_CHALLENGE, the dialler checks it and sends PEER_AUTH,
and only then does the acceptor treat the HELLO as above (PEER_WELCOME or a tie-break refusal).

The first frame of every accepted connection tells a broker from a client: any array starting with
128, even a malformed one, goes to the peer layer (core/links/peer_links.py), which answers it. Decoders check
every field and raise ProtocolError naming the problem; messages of the other layers (overlay
64..95, multicast 96..127, the broker's own 135..159; core/wire/types.py) stay raw lists here and are checked by the
layer that owns them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgpack

from tidings.core.errors import BAD_MESSAGE, UNKNOWN_MESSAGE, ProtocolError
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire.frames import HEADER
from tidings.core.wire.types import LinkType

PEER_VERSION = 2  # the version this broker speaks (see "Versions" above)
PEER_VERSION_MIN = 1  # the oldest it still speaks, to an older peer
COMPLETE_NACKS = 2  # the version from which a peer understands a complete NACK
SHARE_HANDOVER = 2  # the version from which a peer understands SHARE_MOVED and SHARE_LEFT

NONCE_BYTES_MAX = 64

SEQ_MAX = (1 << 63) - 1
TEXT_CHARS_MAX = 1024


@dataclass(frozen=True, slots=True)
class PeerHello:
    version: int
    node: NodeRef
    nonce: bytes | None = None  # the dialler's, in a cluster with a credential


@dataclass(frozen=True, slots=True)
class PeerChallenge:
    nonce: bytes
    proof: bytes


@dataclass(frozen=True, slots=True)
class PeerAuth:
    proof: bytes


@dataclass(frozen=True, slots=True)
class PeerWelcome:
    version: int
    node: NodeRef


@dataclass(frozen=True, slots=True)
class Ping:
    seq: int


@dataclass(frozen=True, slots=True)
class Pong:
    seq: int


@dataclass(frozen=True, slots=True)
class PeerError:
    code: str
    message: str


PeerLinkMessage = PeerHello | PeerWelcome | Ping | Pong | PeerError | PeerChallenge | PeerAuth


# ---- encoders (return whole frames) -------------------------------------------------------------


def encode(message: Sequence[object]) -> bytes:
    """One frame holding `message` (a list whose first element is its type): frames.py's `frame`,
    written out, since every message to a peer passes here (a codec that calls no other module)."""
    body = msgpack.packb(message)
    return HEADER.pack(len(body)) + body


def hello(node: NodeRef, version: int = PEER_VERSION, nonce: bytes | None = None) -> bytes:
    return encode([LinkType.PEER_HELLO, version, node.to_wire()] + ([] if nonce is None else [nonce]))


def challenge(nonce: bytes, proof: bytes) -> bytes:
    return encode([LinkType.PEER_CHALLENGE, nonce, proof])


def auth(proof: bytes) -> bytes:
    return encode([LinkType.PEER_AUTH, proof])


def welcome(node: NodeRef, version: int = PEER_VERSION) -> bytes:
    return encode([LinkType.PEER_WELCOME, version, node.to_wire()])


def ping(seq: int) -> bytes:
    return encode([LinkType.PING, seq])


def pong(seq: int) -> bytes:
    return encode([LinkType.PONG, seq])


def peer_error(code: str, message: str) -> bytes:
    return encode([LinkType.PEER_ERROR, code, message[:TEXT_CHARS_MAX]])


# ---- decoders ------------------------------------------------------------------------------------


def _bad(what: str) -> ProtocolError:
    return ProtocolError(BAD_MESSAGE, what)


def unpack(body: bytes) -> list[object]:
    """The message array of a frame body: a non-empty array starting with an integer type."""
    try:
        msg = msgpack.unpackb(body, strict_map_key=True)
    except Exception as exc:  # msgpack raises several types for garbage
        raise _bad(f"frame body is not valid msgpack ({type(exc).__name__})") from None
    if type(msg) is not list or not msg or type(msg[0]) is not int:
        raise _bad("a peer message is an array starting with its integer type")
    return msg


def _arity(msg: list[object], n: int, name: str) -> None:
    if len(msg) != n:
        raise _bad(f"{name} has {len(msg) - 1} fields, expected {n - 1}")


def _seq(value: object, name: str) -> int:
    if type(value) is not int or not 0 <= value <= SEQ_MAX:
        raise _bad(f"{name} seq must be an integer from 0 to 2**63-1")
    return value


def _text(value: object, what: str) -> str:
    if type(value) is not str or len(value) > TEXT_CHARS_MAX:
        raise _bad(f"{what} must be a string of at most {TEXT_CHARS_MAX} characters")
    return value


def _binary(value: object, what: str) -> bytes:
    if type(value) is not bytes or not 0 < len(value) <= NONCE_BYTES_MAX:
        raise _bad(f"{what} must be 1 to {NONCE_BYTES_MAX} bytes")
    return value


def _greeting(msg: list[object], name: str) -> tuple[int, NodeRef]:
    _arity(msg, 3, name)
    if type(msg[1]) is not int:
        raise _bad(f"{name} version must be an integer")
    return msg[1], NodeRef.from_wire(msg[2])


def _hello(msg: list[object]) -> PeerHello:
    if len(msg) == 4:
        return PeerHello(*_greeting(msg[:3], "PEER_HELLO"), _binary(msg[3], "PEER_HELLO nonce"))
    return PeerHello(*_greeting(msg, "PEER_HELLO"))


def decode_link_message(msg: list[object]) -> PeerLinkMessage:  # noqa: PLR0911 - one return per type
    """Decode an unpacked message of this layer (type 128..132); ProtocolError otherwise."""
    kind = msg[0]
    if kind == LinkType.PING:
        _arity(msg, 2, "PING")
        return Ping(_seq(msg[1], "PING"))
    if kind == LinkType.PONG:
        _arity(msg, 2, "PONG")
        return Pong(_seq(msg[1], "PONG"))
    if kind == LinkType.PEER_HELLO:
        return _hello(msg)
    if kind == LinkType.PEER_CHALLENGE:
        _arity(msg, 3, "PEER_CHALLENGE")
        return PeerChallenge(_binary(msg[1], "PEER_CHALLENGE nonce"), _binary(msg[2], "PEER_CHALLENGE proof"))
    if kind == LinkType.PEER_AUTH:
        _arity(msg, 2, "PEER_AUTH")
        return PeerAuth(_binary(msg[1], "PEER_AUTH proof"))
    if kind == LinkType.PEER_WELCOME:
        return PeerWelcome(*_greeting(msg, "PEER_WELCOME"))
    if kind == LinkType.PEER_ERROR:
        _arity(msg, 3, "PEER_ERROR")
        return PeerError(_text(msg[1], "PEER_ERROR code"), _text(msg[2], "PEER_ERROR message"))
    raise ProtocolError(UNKNOWN_MESSAGE, f"unknown peer message type {kind}")


def decode_hello(body: bytes) -> PeerHello:
    """The first frame of an accepted peer connection, which must be a well-formed PEER_HELLO."""
    msg = unpack(body)
    if msg[0] != LinkType.PEER_HELLO:
        raise _bad("a peer connection starts with PEER_HELLO")
    return _hello(msg)
