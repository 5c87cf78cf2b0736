"""Client wire messages: what a client and its broker say, and how each is written as a frame.

Theory of operation. Each frame body is a msgpack array whose first element is the message type
(types.py ClientType). The dataclasses here are the messages as the machines read them, client to
broker (HELLO ... RELEASE) and broker to client (WELCOME ... ERROR); the encoders return whole
frames. An EVENTS, RECORDS or SPAN body is assembled from already-encoded event records or log
records (see core/event.py, storage/record.py) without decoding or re-encoding them: fan-out
costs one copy, and a large run is cut into frames of about EVENTS_FRAME_BYTES_TARGET. Decoding,
with its checks of every field, is decoders.py. The full table of messages is in docs/protocol.md.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import msgpack

from tidings.core.wire.frames import HEADER
from tidings.core.wire.packable import Packable, WireArray
from tidings.core.wire.types import ClientType

PROTOCOL_VERSION = 1

ORDER_PUBLISHER = "publisher"  # each pubend's events in tick order, pubends interleaved as they come
ORDER_TOTAL = "total"  # every total-order subscriber of a tree sees one interleaving: (tick, pubend)
ORDERS = (ORDER_PUBLISHER, ORDER_TOTAL)

SPAN_BYTES_FACTOR = 2  # a SPAN holds at most this many log reads (log_read_bytes_max), or index intervals

START_NOW = "now"
START_OLDEST = "start"
START_AFTER = "after"


@dataclass(frozen=True, slots=True)
class Hello:
    version: int
    service: str
    instance: str
    nonce: bytes | None = None  # present when the client authenticates (core/auth/handshake.py)


@dataclass(frozen=True, slots=True)
class Auth:
    proof: bytes


@dataclass(frozen=True, slots=True)
class Challenge:
    salt: bytes
    kdf: list[int]  # scrypt [n, r, p]
    nonce: bytes


class Publish:
    """A PUBLISH: `seq`, and `events` ([[channel, attributes, payload], ...], each checked by the
    broker, publish/intake.py). With `producer` (idempotent publish, core/publish/dedup.py) each
    event is [channel, attributes, payload, pseq] and is logged at most once per (producer, pseq).

    A PUBLISH the decoder found in the intake's common shape (core/publish/batch.py `scan`) keeps
    its frame body instead (`frame`, its `count` events starting at byte `at`): the intake encodes
    their records from the body (`batch.encode_frame`), and `events` is decoded only if something
    asks for it (the guard's rules and rates, the intake's event-by-event checks), to exactly what
    msgpack would have given the decoder."""

    __slots__ = ("_events", "at", "count", "frame", "producer", "seq")

    def __init__(self, seq: int, events: list[object] | None = None, producer: object = None,
                 frame: bytes | None = None, at: int = 0, count: int = 0) -> None:
        assert (events is None) != (frame is None), "a PUBLISH has its events or its frame"
        self.seq = seq
        self._events = events
        self.producer = producer
        self.frame = frame
        self.at = at
        self.count = count

    @property
    def events(self) -> list[object]:
        if self._events is None:
            assert self.frame is not None
            self._events = msgpack.unpackb(self.frame, strict_map_key=True)[2]  # (as decoders.py `_unpack`)
        return self._events

    def __eq__(self, other: object) -> bool:
        if type(other) is not Publish:
            return NotImplemented
        return (self.seq, self.events, self.producer) == (other.seq, other.events, other.producer)

    __hash__ = None  # type: ignore[assignment]  # (unhashable: its events are a list)

    def __repr__(self) -> str:
        return f"Publish(seq={self.seq!r}, events={self.events!r}, producer={self.producer!r})"


@dataclass(frozen=True, slots=True)
class Subscribe:
    sub: int
    pattern: str
    filter: str | None
    start: str  # START_NOW, START_OLDEST or START_AFTER
    after: int  # with START_AFTER: deliver ticks > after
    end: int | None  # deliver ticks <= end, then END
    order: str = ORDER_PUBLISHER  # ORDER_PUBLISHER or ORDER_TOTAL (one interleaving per tree)
    # durable (core/durable/checkpoint.py): None for a plain subscription, else the positions per pubend
    # ([[pubend, tick], ...], maybe empty) that override `after` (the default) for the pubends named
    positions: Sequence[Packable] | None = None  # unchecked as decoded: Checkpoint.from_wire checks them
    # a token's home, [address, pubend, registration]; or the name of a broker-held durable subscription
    home: Sequence[Packable] | str | None = None


@dataclass(frozen=True, slots=True)
class Read:
    """A bounded read in bulk of the ticks `(after, end]` of this broker's own pubend: the matching
    records come back as logged, many to a RECORDS frame, then END (GAP where retention released
    some); the broker checks it as it checks a SUBSCRIBE."""

    sub: int
    pattern: str
    filter: str | None
    after: int
    end: int
    spans: bool = False  # the reader takes SPAN frames (the broker may still send RECORDS)


@dataclass(frozen=True, slots=True)
class Release:
    """The application consumed durable subscription `sub`'s events through `checkpoint`
    ([default, [[pubend, tick], ...]], as a token holds it)."""

    sub: int
    checkpoint: list[object]  # unchecked as decoded: Checkpoint.from_wire checks it


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    sub: int
    forget: bool = False  # a durable subscription ends for good, rather than going away


@dataclass(frozen=True, slots=True)
class Renew:
    pass


@dataclass(frozen=True, slots=True)
class StatusRequest:
    req: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    pass


@dataclass(frozen=True, slots=True)
class Welcome:
    version: int
    info: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int
    pubend: str
    ticks: list[int | None]
    duplicates: list[int] = field(default_factory=list)  # indexes of events logged before (core/publish/dedup.py)


@dataclass(frozen=True, slots=True)
class Events:
    sub: int
    records: list[object]  # decoded event arrays, unchecked: core.event.event_from_fields checks each


@dataclass(frozen=True, slots=True)
class Records:
    sub: int
    count: int  # how many records `blob` holds (the client's buffer counts them)
    blob: bytes  # a msgpack array of `count` event records, as logged; decoded by the reader


@dataclass(frozen=True, slots=True)
class Span:
    """A READ's records as the broker's log holds them: `blob` is a run of whole log records
    (storage/record.py: header, checksum, tick, body) holding every one with after < tick <=
    through, among others the reader drops; it checks every checksum (storage.record.records_in)
    and tests the READ's pattern itself. Sent only to a reader that could read every channel."""

    sub: int
    after: int
    through: int
    blob: bytes


@dataclass(frozen=True, slots=True)
class Subscribed:
    sub: int
    position: int  # delivery starts after this tick
    checkpoint: Any = None  # a durable subscription's start, [default, [[pubend, tick], ...]]


@dataclass(frozen=True, slots=True)
class Advice:
    reason: object
    entries: object  # checked by core.advice.decode: a client ignores advice it cannot read


@dataclass(frozen=True, slots=True)
class Silence:
    sub: int
    positions: list[object]  # [[pubend, tick], ...]: delivered or not matching up to each tick; unchecked


@dataclass(frozen=True, slots=True)
class Gap:
    sub: int
    after: int
    through: int
    pubend: str | None = None  # whose ticks; absent from an older broker (its own pubend's)


@dataclass(frozen=True, slots=True)
class End:
    sub: int
    through: int


@dataclass(frozen=True, slots=True)
class StatusReply:
    req: int
    status: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Error:
    code: str
    message: str
    context: dict[str, Any] = field(default_factory=dict)


def _pack(body: Sequence[object]) -> bytes:  # a message array: msgpack packs what the encoders give
    packed = msgpack.packb(body)  # framed here (frames.py's header), as _frame_of does: an encoder is one call
    return HEADER.pack(len(packed)) + packed


# ---- encoders (return whole frames) -------------------------------------------------------------


def hello(service: str, instance: str, version: int = PROTOCOL_VERSION, nonce: bytes | None = None) -> bytes:
    return _pack([ClientType.HELLO, version, service, instance] + ([] if nonce is None else [nonce]))


def auth(proof: bytes) -> bytes:
    return _pack([ClientType.AUTH, proof])


def challenge(salt: bytes, kdf: list[int], nonce: bytes) -> bytes:
    return _pack([ClientType.CHALLENGE, salt, kdf, nonce])


def publish(seq: int, events: Sequence[Sequence[object]], producer: str | None = None) -> bytes:
    """With `producer`, each event is [channel, attributes, payload, pseq]: an idempotent publish."""
    return _pack([ClientType.PUBLISH, seq, events] if producer is None else [ClientType.PUBLISH, seq, events, producer])


def subscribe(msg: Subscribe) -> bytes:
    start: WireArray = [msg.start] if msg.start != START_AFTER else [START_AFTER, msg.after]
    fields = [ClientType.SUBSCRIBE, msg.sub, msg.pattern, msg.filter, start, msg.end]
    if msg.home is not None:
        return _pack([*fields, msg.order, msg.positions or [], msg.home])
    if msg.positions is not None:
        return _pack([*fields, msg.order, msg.positions])
    return _pack(fields if msg.order == ORDER_PUBLISHER else [*fields, msg.order])


def read(msg: Read) -> bytes:
    fields = [ClientType.READ, msg.sub, msg.pattern, msg.filter, msg.after, msg.end]
    return _pack([*fields, True] if msg.spans else fields)


def release(sub: int, checkpoint: Sequence[object]) -> bytes:
    return _pack([ClientType.RELEASE, sub, checkpoint])


def unsubscribe(sub: int, forget: bool = False) -> bytes:
    """`forget`: a durable subscription ends for good (its broker stops holding events for it);
    without it, it is only away, like a closed connection."""
    return _pack([ClientType.UNSUBSCRIBE, sub, True] if forget else [ClientType.UNSUBSCRIBE, sub])


def status_request(req: int) -> bytes:
    return _pack([ClientType.STATUS, req])


def renew() -> bytes:
    return _pack([ClientType.RENEW])


def heartbeat() -> bytes:
    return _pack([ClientType.HEARTBEAT])


def heartbeat_reply() -> bytes:
    return _pack([ClientType.HEARTBEAT_REPLY])


def welcome(info: dict[str, Any]) -> bytes:
    return _pack([ClientType.WELCOME, PROTOCOL_VERSION, info])


def ack(seq: int, pubend: str, ticks: list[int | None], duplicates: list[int] | None = None) -> bytes:
    """`duplicates`: the indexes of events answered with the tick they were logged with before."""
    head = [ClientType.ACK, seq, pubend, ticks]
    return _pack([*head, duplicates] if duplicates else head)


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


EVENTS_FRAME_BYTES_TARGET = 1024 * 1024


def size_chunks(records: list[bytes], target: int = EVENTS_FRAME_BYTES_TARGET) -> list[list[bytes]]:
    """`records` in order, cut into runs of about `target` bytes at most (a larger record runs
    alone), so a big group commit never makes a frame its receiver must refuse."""
    return [run for run, _ in _sized_runs(records, target)]


def _sized_runs(records: list[bytes], target: int) -> list[tuple[list[bytes], int]]:
    """`size_chunks`'s runs, each with its bytes. Each run's end is found by bisection over the
    records' running sizes: a step per run, not per record, and one pass over the records."""
    ends = list(accumulate(map(len, records)))
    if not ends or ends[-1] <= target:
        return [(records, ends[-1] if ends else 0)]
    runs: list[tuple[list[bytes], int]] = []
    start, base, count = 0, 0, len(records)
    while start < count:
        first = bisect_right(ends, base, start)  # the run's first record with bytes: in it, however large
        stop = min(max(bisect_right(ends, base + target, start), first + 1), count)
        runs.append((records[start:stop], ends[stop - 1] - base))
        start, base = stop, ends[stop - 1]
    return runs


_EVENTS_HEAD = b"\x93" + msgpack.packb(ClientType.EVENTS)  # an EVENTS body: a 3-element array, its type first


def events_frames(sub: int, records: list[bytes], size: int | None = None) -> list[bytes]:
    """EVENTS frames for `records` (`size`: their bytes, when the caller counted them), each about
    EVENTS_FRAME_BYTES_TARGET at most (one, sized once, when they fit: every fan-out but a big
    group commit's, whose runs come sized)."""
    if size is None:
        size = sum(map(len, records))
    if size <= EVENTS_FRAME_BYTES_TARGET:
        return [_events(sub, records, size)]
    return [_events(sub, run, run_size) for run, run_size in _sized_runs(records, EVENTS_FRAME_BYTES_TARGET)]


def events(sub: int, records: list[bytes]) -> bytes:
    """An EVENTS frame from already-encoded event records."""
    return _events(sub, records, sum(map(len, records)))


def _events(sub: int, records: list[bytes], size: int) -> bytes:
    """The EVENTS frame of `records`, `size` bytes in all: one copy of them (the rest packed by
    hand: a sub id below 128 is its own byte, msgpack's positive fixint)."""
    head = _EVENTS_HEAD + (bytes((sub,)) if 0 <= sub < 0x80 else msgpack.packb(sub))
    array = _array_header(len(records))
    return b"".join([HEADER.pack(len(head) + len(array) + size), head, array, *records])


def records_frames(sub: int, records: list[bytes]) -> list[bytes]:
    """RECORDS frames for `records`, each about EVENTS_FRAME_BYTES_TARGET at most: the records'
    bytes are copied as they are into one binary field (no per-record encoding on either side)."""
    return [_records(sub, chunk) for chunk in size_chunks(records)]


def _records(sub: int, records: list[bytes]) -> bytes:
    array_header = _array_header(len(records))
    blob_bytes = len(array_header) + sum(map(len, records))
    return _frame_of([b"\x94", msgpack.packb(ClientType.RECORDS), msgpack.packb(sub), msgpack.packb(len(records)),
                      b"\xc6", struct.pack(">I", blob_bytes), array_header, *records])  # bin32: past 64 KiB


def span(sub: int, after: int, through: int, blob: bytes) -> bytes:
    """A SPAN frame: `blob` copied once, as a bin32 field (spans pass 64 KiB)."""
    return _frame_of([b"\x95", msgpack.packb(ClientType.SPAN), msgpack.packb(sub), msgpack.packb(after),
                      msgpack.packb(through),
                      b"\xc6", struct.pack(">I", len(blob)), blob])


def _frame_of(parts: list[bytes]) -> bytes:
    """The frame whose body is `parts` joined: one copy of the records, however large."""
    return b"".join([HEADER.pack(sum(map(len, parts))), *parts])


def subscribed(sub: int, position: int, checkpoint: WireArray | None = None) -> bytes:
    head = [ClientType.SUBSCRIBED, sub, position]
    return _pack(head if checkpoint is None else [*head, checkpoint])


def silence(sub: int, positions: Sequence[Sequence[object]]) -> bytes:
    return _pack([ClientType.SILENCE, sub, positions])


def advice(reason: str, entries: Sequence[Sequence[object]]) -> bytes:
    return _pack([ClientType.ADVICE, reason, entries])


def gap(sub: int, after: int, through: int, pubend: str) -> bytes:
    """Events of `pubend` after `after` up to `through` may have matched but were released."""
    return _pack([ClientType.GAP, sub, after, through, pubend])


def end(sub: int, through: int) -> bytes:
    return _pack([ClientType.END, sub, through])


def status_reply(req: int, status: dict[str, Any]) -> bytes:
    return _pack([ClientType.STATUS_REPLY, req, status])


def error(code: str, message: str, **context: Any) -> bytes:
    return _pack([ClientType.ERROR, code, message, context])
