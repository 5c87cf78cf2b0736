"""Decoding the client wire messages (messages.py): a frame body in, a checked message out.

Theory of operation. Each frame body is a msgpack array whose first element is the message type
(types.py ClientType). `decode_client_message` reads what a client sends a broker and
`decode_broker_message` what a broker sends a client; both check the shape of every field, and an
optional trailing field added after version 1 shipped is told by the array's length, so an older
peer's message still reads. Anything else raises ProtocolError naming the problem (BAD_MESSAGE, or
UNKNOWN_MESSAGE for a type the direction does not have), so the machines above never see a
malformed message. `message_type` peeks at a body's type without raising.

A PUBLISH in the intake's common shape (`[PUBLISH, seq, [[channel, {}, payload], ...]]`, the
client library's) is not decoded here: the compiled pass (core/publish/batch.py `scan`) reads that
it is exactly that, with no Python object per event, and the Publish keeps its body for the
intake (`batch.encode_frame`); its `events` are decoded by msgpack only if asked for. Any other
body, and every body when the compiled pass is off, is decoded by msgpack and checked here.
"""

from __future__ import annotations

from typing import Any

import msgpack

from tidings.core.errors import BAD_MESSAGE, UNKNOWN_MESSAGE, ProtocolError
from tidings.core.publish import batch
from tidings.core.wire.messages import (
    ORDER_PUBLISHER,
    ORDERS,
    START_AFTER,
    START_NOW,
    START_OLDEST,
    Ack,
    Advice,
    Auth,
    Challenge,
    End,
    Error,
    Events,
    Gap,
    Heartbeat,
    HeartbeatReply,
    Hello,
    Publish,
    Read,
    Records,
    Release,
    Renew,
    Silence,
    Span,
    StatusReply,
    StatusRequest,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Welcome,
)
from tidings.core.wire.types import ClientType


def _bad(what: str) -> ProtocolError:
    return ProtocolError(BAD_MESSAGE, what)


def _int(v: object, what: str, lo: int = 0) -> int:
    if type(v) is not int or v < lo:
        raise _bad(f"{what} must be an integer >= {lo}")
    return v


def _bytes(v: object, what: str, size_max: int = 256) -> bytes:
    if type(v) is not bytes or len(v) > size_max:
        raise _bad(f"{what} must be binary, at most {size_max} bytes")
    return v


def _str(v: object, what: str) -> str:
    if not isinstance(v, str):
        raise _bad(f"{what} must be a string")
    return v


# The decoders' boundary: `_unpack` gives the message as msgpack decoded it (a list of Any, unchecked);
# the decoders below check each field they read before they build a typed message, and nothing else sees it.
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
    scanned = batch.scan(body)  # the intake's common PUBLISH, read in place (None: anything else)
    if scanned is not None:
        seq, at, count = scanned
        return Publish(seq, None, None, body, at, count)
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
