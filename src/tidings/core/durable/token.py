"""The checkpoint token (CT): where a durable subscription stands in every pubend's stream.

Theory of operation
-------------------
A durable subscriber has consumed, for each pubend p, every matching event with a tick <= CT(s, p)
(Gryphon durable, section 2). The token is that vector, held by the subscriber, not the broker, so
that it can resume on any broker of the overlay. Pubends the token does not list stand at
`default_tick`, the subscription's start: a pubend that appears later (a new publisher broker) is
read from there, so no event published after the start is missed whichever pubends existed then.

Moves. A token only ever moves forward, pubend by pubend:
- an event from p at tick t was delivered: CT(p) becomes t (`after_event`);
- silence: nothing at or below a horizon h(p) matched (or it is all released L ticks the subscriber
  was told about as a gap): CT(p) becomes h(p) (`after_silence`). Ticks never move backwards, so
  a stale or duplicated message leaves the token as it is.
`covers(other)` says every position of this token is at or past `other`'s, i.e. everything `other`
has consumed this one has too (what a broker checks before releasing for a subscriber).

Wire form. `encode` gives one printable, URL- and shell-safe string:

    "tk1." + base64url-without-padding( msgpack([default_tick, {pubend: tick, ...}]) + crc32 (u32 BE) )

The version prefix lets a later format coexist; the checksum turns a token mangled in storage or
copy-paste into a clear `TokenError`, never a silently wrong position. Entries equal to the default
are left out and pubends are sorted, so equal tokens encode to equal strings. A token lists at most
`TOKEN_PUBENDS_MAX` pubends, each id at most `PUBEND_ID_BYTES_MAX` bytes, so an encoded token is at
most `TOKEN_CHARS_MAX` characters (about 100 KiB); `decode` refuses longer input before decoding.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import msgpack

from tidings.core.errors import TidingsError

BAD_TOKEN = "bad-token"
TOKEN_PREFIX = "tk1."
TOKEN_PUBENDS_MAX = 1024
PUBEND_ID_BYTES_MAX = 64
TICK_MAX = (1 << 64) - 1
_CRC = struct.Struct(">I")
# msgpack: array header, default tick (9 bytes), map header (5), then per pubend a str (2 + id) and
# a tick (9); the crc; base64 turns 3 bytes into 4 characters.
_PAYLOAD_BYTES_MAX = 1 + 9 + 5 + TOKEN_PUBENDS_MAX * (2 + PUBEND_ID_BYTES_MAX + 9) + _CRC.size
TOKEN_CHARS_MAX = len(TOKEN_PREFIX) + (_PAYLOAD_BYTES_MAX * 4 + 2) // 3


class TokenError(TidingsError, ValueError):
    """A string that is not a checkpoint token this version understands (the message says why)."""

    code = BAD_TOKEN


@dataclass(frozen=True, slots=True)
class CheckpointToken:
    """CT(s): `ticks` lists (pubend, tick) pairs sorted by pubend, none equal to `default_tick`."""

    default_tick: int
    ticks: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        assert 0 <= self.default_tick <= TICK_MAX
        assert len(self.ticks) <= TOKEN_PUBENDS_MAX, "token over its pubend limit"
        assert all(a[0] < b[0] for a, b in zip(self.ticks, self.ticks[1:], strict=False)), "unsorted"
        assert all(0 <= t <= TICK_MAX and t != self.default_tick for _, t in self.ticks)

    @classmethod
    def start(cls, default_tick: int, ticks: Mapping[str, int] | None = None) -> CheckpointToken:
        """A token at `default_tick` for every pubend except those `ticks` names."""
        ticks = ticks or {}
        for pubend, tick in ticks.items():
            _check_entry(pubend, tick)
        if not 0 <= default_tick <= TICK_MAX:
            raise TokenError(f"default tick {default_tick} is out of range")
        pairs = tuple(sorted((p, t) for p, t in ticks.items() if t != default_tick))
        if len(pairs) > TOKEN_PUBENDS_MAX:
            raise TokenError(f"a token holds at most {TOKEN_PUBENDS_MAX} pubends, got {len(pairs)}")
        return cls(default_tick, pairs)

    def position(self, pubend: str) -> int:
        """CT(s, pubend): every matching event of `pubend` at or below it has been consumed."""
        for name, tick in self.ticks:
            if name == pubend:
                return tick
        return self.default_tick

    def as_dict(self) -> dict[str, int]:
        return dict(self.ticks)

    def after_event(self, pubend: str, tick: int) -> CheckpointToken:
        """The token once the event of `pubend` at `tick` is consumed (unchanged if not newer)."""
        return self.after_silence({pubend: tick})

    def after_silence(self, horizons: Mapping[str, int]) -> CheckpointToken:
        """The token once nothing more matched up to `horizons[pubend]` (never moves backwards)."""
        moved = {p: t for p, t in horizons.items() if t > self.position(p)}
        if not moved:
            return self
        merged = self.as_dict()
        merged.update(moved)
        return CheckpointToken.start(self.default_tick, merged)

    def covers(self, other: CheckpointToken) -> bool:
        """Whether this token is at or past `other` for every pubend (listed or not)."""
        if self.default_tick < other.default_tick:
            return False
        pubends = {p for p, _ in self.ticks} | {p for p, _ in other.ticks}
        return all(self.position(p) >= other.position(p) for p in pubends)

    def encode(self) -> str:
        body = msgpack.packb([self.default_tick, dict(self.ticks)])
        raw = body + _CRC.pack(zlib.crc32(body))
        return TOKEN_PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    def __str__(self) -> str:
        return self.encode()


def decode(text: str) -> CheckpointToken:
    """The token `text` encodes; `TokenError` saying why for anything else."""
    if not isinstance(text, str):
        raise TokenError(f"a token is a string, got {type(text).__name__}")
    text = text.strip()
    if len(text) > TOKEN_CHARS_MAX:
        raise TokenError(f"token is {len(text)} characters, at most {TOKEN_CHARS_MAX} are allowed")
    version, dot, rest = text.partition(".")
    if not dot or not version.startswith("tk"):
        raise TokenError("not a checkpoint token (it should start with 'tk1.')")
    if version + "." != TOKEN_PREFIX:
        raise TokenError(f"token version {version!r} is not supported (this broker reads {TOKEN_PREFIX[:-1]!r})")
    try:
        raw = base64.b64decode(rest + "=" * (-len(rest) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TokenError(f"token is not valid base64url ({exc})") from exc
    if len(raw) <= _CRC.size:
        raise TokenError("token is too short")
    body, crc = raw[:-_CRC.size], _CRC.unpack(raw[-_CRC.size:])[0]
    if zlib.crc32(body) != crc:
        raise TokenError("token checksum does not match: it was altered or cut")
    try:
        fields = msgpack.unpackb(body, strict_map_key=True, raw=False)
    except Exception as exc:  # msgpack raises several types for garbage
        raise TokenError(f"token content is not readable ({type(exc).__name__})") from exc
    if not (isinstance(fields, list) and len(fields) == 2 and type(fields[0]) is int
            and isinstance(fields[1], dict)):
        raise TokenError("token content has the wrong shape")
    default_tick, ticks = fields
    if not all(isinstance(p, str) and type(t) is int for p, t in ticks.items()):
        raise TokenError("token entries must map pubend names to ticks")
    return CheckpointToken.start(default_tick, ticks)


def _check_entry(pubend: str, tick: int) -> None:
    if not pubend or len(pubend.encode()) > PUBEND_ID_BYTES_MAX:
        raise TokenError(f"pubend id {pubend[:80]!r} must be 1..{PUBEND_ID_BYTES_MAX} bytes")
    if not 0 <= tick <= TICK_MAX:
        raise TokenError(f"tick {tick} of pubend {pubend[:80]!r} is out of range")
