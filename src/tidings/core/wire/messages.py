"""Wire messages: each frame body is a msgpack array whose first element is the message type.

Decoding checks the shape of every field and raises ProtocolError naming the problem, so the
machines above never see a malformed message. An EVENTS body is assembled from already-encoded
event records (see core/event.py) without decoding or re-encoding them: fan-out costs one copy.
The full table of messages is in docs/protocol.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack

from tidings.core.errors import BAD_MESSAGE, UNKNOWN_MESSAGE, ProtocolError
from tidings.core.wire.frames import HEADER, frame
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


@dataclass(frozen=True, slots=True)
class Publish:
    seq: int
    events: list[Any]  # [[channel, attributes, payload], ...]; each checked by the broker
    # idempotent publish (core/publish/dedup.py): with a producer id, each event is [channel, attributes,
    # payload, pseq] and is logged at most once per (producer, pseq); checked by the broker
    producer: Any = None


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
    positions: list[Any] | None = None
    # a token's home, [address, pubend, registration]; or the name of a broker-held durable subscription
    home: list[Any] | str | None = None


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
    checkpoint: list[Any]


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
    records: list[list[Any]]  # decoded event arrays, see core.event.event_from_fields


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
    reason: Any
    entries: Any  # checked by core.advice.decode: a client ignores advice it cannot read


@dataclass(frozen=True, slots=True)
class Silence:
    sub: int
    positions: list[Any]  # [[pubend, tick], ...]: delivered or not matching up to each tick


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


def _pack(body: list[Any]) -> bytes:
    return frame(msgpack.packb(body))


# ---- encoders (return whole frames) -------------------------------------------------------------


def hello(service: str, instance: str, version: int = PROTOCOL_VERSION, nonce: bytes | None = None) -> bytes:
    return _pack([ClientType.HELLO, version, service, instance] + ([] if nonce is None else [nonce]))


def auth(proof: bytes) -> bytes:
    return _pack([ClientType.AUTH, proof])


def challenge(salt: bytes, kdf: list[int], nonce: bytes) -> bytes:
    return _pack([ClientType.CHALLENGE, salt, kdf, nonce])


def publish(seq: int, events: list[list[Any]], producer: str | None = None) -> bytes:
    """With `producer`, each event is [channel, attributes, payload, pseq]: an idempotent publish."""
    return _pack([ClientType.PUBLISH, seq, events] if producer is None else [ClientType.PUBLISH, seq, events, producer])


def subscribe(msg: Subscribe) -> bytes:
    start: list[Any] = [msg.start] if msg.start != START_AFTER else [START_AFTER, msg.after]
    fields = [ClientType.SUBSCRIBE, msg.sub, msg.pattern, msg.filter, start, msg.end]
    if msg.home is not None:
        return _pack([*fields, msg.order, msg.positions or [], msg.home])
    if msg.positions is not None:
        return _pack([*fields, msg.order, msg.positions])
    return _pack(fields if msg.order == ORDER_PUBLISHER else [*fields, msg.order])


def read(msg: Read) -> bytes:
    fields = [ClientType.READ, msg.sub, msg.pattern, msg.filter, msg.after, msg.end]
    return _pack([*fields, True] if msg.spans else fields)


def release(sub: int, checkpoint: list[Any]) -> bytes:
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
    if sum(map(len, records)) <= target:
        return [records]
    chunks: list[list[bytes]] = []
    start = size = 0
    for i, record in enumerate(records):
        if size and size + len(record) > target:
            chunks.append(records[start:i])
            start, size = i, 0
        size += len(record)
    chunks.append(records[start:])
    return chunks


def events_frames(sub: int, records: list[bytes]) -> list[bytes]:
    """EVENTS frames for `records`, each about EVENTS_FRAME_BYTES_TARGET at most."""
    return [events(sub, chunk) for chunk in size_chunks(records)]


def events(sub: int, records: list[bytes]) -> bytes:
    """An EVENTS frame from already-encoded event records."""
    return _frame_of([b"\x93", msgpack.packb(ClientType.EVENTS), msgpack.packb(sub), _array_header(len(records)),
                      *records])


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


def subscribed(sub: int, position: int, checkpoint: list[Any] | None = None) -> bytes:
    head = [ClientType.SUBSCRIBED, sub, position]
    return _pack(head if checkpoint is None else [*head, checkpoint])


def silence(sub: int, positions: list[list[Any]]) -> bytes:
    return _pack([ClientType.SILENCE, sub, positions])


def advice(reason: str, entries: list[list[Any]]) -> bytes:
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


# ---- decoders ------------------------------------------------------------------------------------


def _bad(what: str) -> ProtocolError:
    return ProtocolError(BAD_MESSAGE, what)


def _int(v: Any, what: str, lo: int = 0) -> int:
    if type(v) is not int or v < lo:
        raise _bad(f"{what} must be an integer >= {lo}")
    return v


def _bytes(v: Any, what: str, size_max: int = 256) -> bytes:
    if type(v) is not bytes or len(v) > size_max:
        raise _bad(f"{what} must be binary, at most {size_max} bytes")
    return v


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise _bad(f"{what} must be a string")
    return v


def _unpack(body: bytes) -> list[Any]:
    try:
        msg = msgpack.unpackb(body, strict_map_key=True)
    except Exception as exc:  # msgpack raises several types for garbage
        raise _bad(f"frame body is not valid msgpack ({type(exc).__name__})") from None
    if not isinstance(msg, list) or not msg or type(msg[0]) is not int:
        raise _bad("a message is an array starting with its integer type")
    return msg


def message_type(body: bytes) -> int | None:
    """The type of a frame body, or None when it is not a message at all."""
    try:
        kind: int = _unpack(body)[0]
    except ProtocolError:
        return None
    return kind


def _arity(msg: list[Any], n: int, name: str) -> None:
    if len(msg) != n:
        raise _bad(f"{name} has {len(msg) - 1} fields, expected {n - 1}")


def _decode_start(start: Any) -> tuple[str, int]:
    if not isinstance(start, list) or not start:
        raise _bad("SUBSCRIBE start must be [\"now\"], [\"start\"] or [\"after\", tick]")
    kind = start[0]
    if kind in (START_NOW, START_OLDEST) and len(start) == 1:
        return kind, 0
    if kind == START_AFTER and len(start) == 2:
        return kind, _int(start[1], "SUBSCRIBE start tick")
    raise _bad("SUBSCRIBE start must be [\"now\"], [\"start\"] or [\"after\", tick]")


def _decode_subscribe(msg: list[Any]) -> Subscribe:
    order = ORDER_PUBLISHER
    positions = home = None
    if len(msg) == 9:  # durable from a token that names its home
        home = msg.pop()
        if not (type(home) is list and len(home) == 3) and type(home) is not str:
            raise _bad("SUBSCRIBE home must be [address, pubend, registration] or a name")
    if len(msg) == 8:  # durable: the positions per pubend (core/durable/checkpoint.py), optional
        positions = msg.pop()
        if type(positions) is not list:
            raise _bad("SUBSCRIBE positions must be an array")
    if len(msg) == 7:  # the order was added to SUBSCRIBE after version 1 shipped: optional
        order = msg.pop()
        if order not in ORDERS:
            raise _bad(f"SUBSCRIBE order must be one of {', '.join(ORDERS)}")
    _arity(msg, 6, "SUBSCRIBE")
    flt = msg[3]
    if flt is not None:
        _str(flt, "SUBSCRIBE filter")
    start, after = _decode_start(msg[4])
    end_tick = None if msg[5] is None else _int(msg[5], "SUBSCRIBE end")
    return Subscribe(_int(msg[1], "SUBSCRIBE id"), _str(msg[2], "SUBSCRIBE pattern"),
                     flt, start, after, end_tick, order, positions, home)


def _decode_read(msg: list[Any]) -> Read:
    spans = msg.pop() if len(msg) == 7 else False
    _arity(msg, 6, "READ")
    flt = msg[3]
    if flt is not None:
        _str(flt, "READ filter")
    if type(spans) is not bool:
        raise _bad("READ spans must be a boolean")
    return Read(_int(msg[1], "READ id"), _str(msg[2], "READ pattern"), flt, _int(msg[4], "READ after"),
                _int(msg[5], "READ end"), spans)


def decode_client_message(  # noqa: PLR0911, PLR0912 - one return per message type
    body: bytes,
) -> Hello | Auth | Publish | Subscribe | Read | Unsubscribe | StatusRequest | Renew | Release | Heartbeat:
    msg = _unpack(body)
    kind = msg[0]
    if kind == ClientType.PUBLISH:
        producer = msg.pop() if len(msg) == 4 else None  # optional: idempotent publish
        _arity(msg, 3, "PUBLISH")
        if not isinstance(msg[2], list):
            raise _bad("PUBLISH events must be an array")
        return Publish(_int(msg[1], "PUBLISH seq"), msg[2], producer)
    if kind == ClientType.SUBSCRIBE:
        return _decode_subscribe(msg)
    if kind == ClientType.READ:
        return _decode_read(msg)
    if kind == ClientType.UNSUBSCRIBE:
        if len(msg) != 2:
            _arity(msg, 3, "UNSUBSCRIBE")
            if type(msg[2]) is not bool:
                raise _bad("UNSUBSCRIBE forget must be a boolean")
        return Unsubscribe(_int(msg[1], "UNSUBSCRIBE id"), len(msg) == 3 and msg[2])
    if kind == ClientType.RENEW:
        _arity(msg, 1, "RENEW")
        return Renew()
    if kind == ClientType.HEARTBEAT:
        _arity(msg, 1, "HEARTBEAT")
        return Heartbeat()
    if kind == ClientType.RELEASE:
        _arity(msg, 3, "RELEASE")
        if type(msg[2]) is not list:
            raise _bad("RELEASE checkpoint must be an array")
        return Release(_int(msg[1], "RELEASE id"), msg[2])
    if kind == ClientType.STATUS:
        _arity(msg, 2, "STATUS")
        return StatusRequest(_int(msg[1], "STATUS id"))
    if kind == ClientType.HELLO:
        if len(msg) != 5:
            _arity(msg, 4, "HELLO")
        nonce = _bytes(msg[4], "HELLO nonce") if len(msg) == 5 else None
        return Hello(_int(msg[1], "HELLO version"), _str(msg[2], "HELLO service"),
                     _str(msg[3], "HELLO instance"), nonce)
    if kind == ClientType.AUTH:
        _arity(msg, 2, "AUTH")
        return Auth(_bytes(msg[1], "AUTH proof"))
    raise ProtocolError(UNKNOWN_MESSAGE, f"unknown message type {kind}")


BrokerMessage = (Welcome | Challenge | Ack | Events | Records | Span | Subscribed | Gap | End | StatusReply | Error
                 | Advice | Silence | HeartbeatReply)


def decode_broker_message(body: bytes) -> BrokerMessage:  # noqa: PLR0911, PLR0912, PLR0915 - one return per type
    msg = _unpack(body)
    kind = msg[0]
    if kind == ClientType.EVENTS:
        _arity(msg, 3, "EVENTS")
        if not isinstance(msg[2], list):
            raise _bad("EVENTS records must be an array")
        return Events(_int(msg[1], "EVENTS id"), msg[2])
    if kind == ClientType.RECORDS:
        _arity(msg, 4, "RECORDS")
        if type(msg[3]) is not bytes:
            raise _bad("RECORDS blob must be binary")
        return Records(_int(msg[1], "RECORDS id"), _int(msg[2], "RECORDS count"), msg[3])
    if kind == ClientType.SPAN:
        _arity(msg, 5, "SPAN")
        if type(msg[4]) is not bytes:
            raise _bad("SPAN blob must be binary")
        return Span(_int(msg[1], "SPAN id"), _int(msg[2], "SPAN after"), _int(msg[3], "SPAN through"), msg[4])
    if kind == ClientType.ACK:
        duplicates = msg.pop() if len(msg) == 5 else []
        _arity(msg, 4, "ACK")
        if not isinstance(msg[3], list):
            raise _bad("ACK ticks must be an array")
        if type(duplicates) is not list or not all(type(i) is int for i in duplicates):
            raise _bad("ACK duplicates must be an array of indexes")
        return Ack(_int(msg[1], "ACK seq"), _str(msg[2], "ACK pubend"), msg[3], duplicates)
    if kind == ClientType.SUBSCRIBED:
        checkpoint = msg.pop() if len(msg) == 4 else None
        _arity(msg, 3, "SUBSCRIBED")
        return Subscribed(_int(msg[1], "SUBSCRIBED id"), _int(msg[2], "SUBSCRIBED position"), checkpoint)
    if kind == ClientType.SILENCE:
        _arity(msg, 3, "SILENCE")
        if not isinstance(msg[2], list):
            raise _bad("SILENCE positions must be an array")
        return Silence(_int(msg[1], "SILENCE id"), msg[2])
    if kind == ClientType.GAP:
        if len(msg) != 4:
            _arity(msg, 5, "GAP")
        return Gap(_int(msg[1], "GAP id"), _int(msg[2], "GAP after"), _int(msg[3], "GAP through"),
                   _str(msg[4], "GAP pubend") if len(msg) == 5 else None)
    if kind == ClientType.END:
        _arity(msg, 3, "END")
        return End(_int(msg[1], "END id"), _int(msg[2], "END through"))
    if kind == ClientType.STATUS_REPLY:
        _arity(msg, 3, "STATUS_REPLY")
        if not isinstance(msg[2], dict):
            raise _bad("STATUS_REPLY status must be a map")
        return StatusReply(_int(msg[1], "STATUS_REPLY id"), msg[2])
    if kind == ClientType.ERROR:
        _arity(msg, 4, "ERROR")
        ctx = msg[3] if isinstance(msg[3], dict) else {}
        return Error(_str(msg[1], "ERROR code"), _str(msg[2], "ERROR message"), ctx)
    if kind == ClientType.WELCOME:
        _arity(msg, 3, "WELCOME")
        if not isinstance(msg[2], dict):
            raise _bad("WELCOME info must be a map")
        return Welcome(_int(msg[1], "WELCOME version"), msg[2])
    if kind == ClientType.ADVICE:
        _arity(msg, 3, "ADVICE")
        return Advice(msg[1], msg[2])
    if kind == ClientType.HEARTBEAT_REPLY:
        _arity(msg, 1, "HEARTBEAT_REPLY")
        return HeartbeatReply()
    if kind == ClientType.CHALLENGE:
        _arity(msg, 4, "CHALLENGE")
        kdf = msg[2]
        if not isinstance(kdf, list) or len(kdf) != 3 or not all(type(k) is int for k in kdf):
            raise _bad("CHALLENGE kdf must be [n, r, p]")
        return Challenge(_bytes(msg[1], "CHALLENGE salt"), kdf, _bytes(msg[3], "CHALLENGE nonce"))
    raise ProtocolError(UNKNOWN_MESSAGE, f"unknown message type {kind}")
