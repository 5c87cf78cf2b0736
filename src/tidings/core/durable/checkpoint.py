"""The checkpoint token of a durable subscription (Gryphon durable: CT, a vector of timestamps).

A durable subscription's position is not one tick: ticks are per pubend, and no tick spans brokers.
It is a vector `positions` {pubend: tick}, meaning "every event of that pubend up to this tick was
delivered to the subscriber, or did not match", and a `default` tick for the pubends the vector does
not name (the subscription's start: any pubend not heard of yet is wanted after it). The token
advances with each delivered event (its pubend's entry becomes its tick) and with each SILENCE the
broker sends (entries move up while nothing matches, so a token never lags far behind).

The token also names the subscription's *home*: the broker that hosts it (its address and pubend
id) and the registration there (core/durable/registrations.py), which holds release back while the
subscriber is away. Resuming on another broker moves the home there, and the new home tells the old
one to forget the registration.

The application holds the token as one printable string and hands it back to `subscribe` on any
broker: `tk1.` then base64url (no padding) of the msgpack array [default, [[pubend, tick], ...]]
(and [address, pubend, registration] when it has a home) and a CRC-32 of that array, so a mangled
or truncated token is a clear error, never a wrong position.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack

from tidings.core import errors
from tidings.core.errors import TidingsError
from tidings.core.wire.packable import WireArray

PREFIX = "tk1."
POSITIONS_MAX = 4096  # pubends one token names; SUBSCRIBE and SUBSCRIBED carry at most this many
TOKEN_CHARS_MAX = 256 * 1024


class TokenError(TidingsError, ValueError):
    code = errors.BAD_START


HOME_BYTES_MAX = 256  # a home's address and pubend id


class Home(NamedTuple):
    """Where a durable subscription is registered: the broker's address and pubend id, and the
    registration number there."""

    address: str
    pubend: str
    registration: int


@dataclass(slots=True)
class Checkpoint:
    default: int
    positions: dict[str, int] = field(default_factory=dict)
    home: Home | None = None

    def delivered(self, pubend: str, tick: int) -> None:
        if tick > self.positions.get(pubend, self.default):
            self.positions[pubend] = tick

    def silence(self, positions: dict[str, int]) -> None:
        for pubend, tick in positions.items():
            self.delivered(pubend, tick)

    def position(self, pubend: str) -> int:
        return self.positions.get(pubend, self.default)

    def release(self, other: Checkpoint) -> None:
        """Move up to `other` wherever it is further (a release never goes back)."""
        if other.default > self.default:
            for pubend in [p for p, t in self.positions.items() if t < other.default]:
                self.positions[pubend] = other.default
            self.default = other.default
        for pubend, tick in other.positions.items():
            self.delivered(pubend, tick)

    def to_wire(self) -> list[Any]:  # Any: core/session/cursor.py reads to_wire()[1] (positions_wire)
        body: WireArray = [self.default, self.positions_wire()]
        return body if self.home is None else [*body, list(self.home)]

    def positions_wire(self) -> WireArray:
        """The [[pubend, tick], ...] of `to_wire` (a SUBSCRIBE's positions)."""
        return [[p, t] for p, t in sorted(self.positions.items())]

    @classmethod
    def from_wire(cls, value: object) -> Checkpoint:
        """From [default, [[pubend, tick], ...]] or [default, [[pubend, tick], ...], [address,
        pubend, registration]]; TokenError when it is anything else."""
        if (type(value) is not list or len(value) not in (2, 3) or type(value[0]) is not int or value[0] < 0
                or type(value[1]) is not list or len(value[1]) > POSITIONS_MAX):
            raise TokenError("a checkpoint is [default tick, [[pubend, tick], ...]]")
        positions: dict[str, int] = {}
        for item in value[1]:
            if (type(item) is not list or len(item) != 2 or type(item[0]) is not str or not item[0]
                    or type(item[1]) is not int or item[1] < 0):
                raise TokenError("a checkpoint position is [pubend, tick]")
            positions[item[0]] = item[1]
        return cls(value[0], positions, _home(value[2]) if len(value) == 3 else None)

    def encode(self) -> str:
        body = msgpack.packb(self.to_wire())
        crc = zlib.crc32(body).to_bytes(4, "big")
        return PREFIX + base64.urlsafe_b64encode(body + crc).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Checkpoint:
        if not isinstance(token, str) or len(token) > TOKEN_CHARS_MAX:
            raise TokenError("a token is a string as Subscription.token gave it")
        if not token.startswith(PREFIX):
            version = token.split(".", 1)[0] if "." in token else token[:8]
            raise TokenError(f"not a tidings checkpoint token of version 1 (it starts {version!r})")
        text = token[len(PREFIX):]
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raise TokenError("the checkpoint token is mangled (not base64url)") from None
        body, crc = raw[:-4], raw[-4:]
        if len(raw) < 5 or zlib.crc32(body).to_bytes(4, "big") != crc:
            raise TokenError("the checkpoint token is mangled or truncated (checksum mismatch)")
        try:
            value = msgpack.unpackb(body)
        except (ValueError, msgpack.exceptions.ExtraData):
            raise TokenError("the checkpoint token is mangled (bad body)") from None
        return cls.from_wire(value)


def _home(value: object) -> Home:
    if (type(value) is list and len(value) == 3 and all(type(v) is str and 0 < len(v) <= HOME_BYTES_MAX
                                                        for v in value[:2])
            and type(value[2]) is int and 0 < value[2] < 2**63):
        return Home(*value)
    raise TokenError("a checkpoint's home is [address, pubend, registration]")
