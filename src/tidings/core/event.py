"""Events and their one encoding, shared by the pubend log and the wire.

An event is logged once, at its publisher's broker, as a msgpack array

    [pubend, tick, channel, attributes, service, instance, payload]            (an anonymous source)
    [pubend, tick, channel, attributes, service, instance, payload, true]      (an authenticated one)

and the very same bytes travel in EVENTS frames to every subscriber: the broker never re-encodes an
event on the way out. The tick is the pubend's stream time: microseconds since the Unix epoch,
strictly increasing per pubend, so `time` is derived from it.

The eighth element says that the source (service, instance) authenticated: the publisher's broker
stamps it from the connection's handshake, never from anything the client sends. Absent means not
authenticated, so an anonymous source's record is byte for byte what brokers wrote before the flag
existed, and logs written then read as they are (their sources were not vouched for). Readers take
a boolean there, `false` as absence; nothing else.

`EventRecord` is the record's one definition: its fields in their logged order. Code that has a
record's fields reads them by name (an `EventRecord`) or, where a decoded record is a raw list on
a hot path, by the positions below (`CHANNEL`, ...), which are taken from the same definition.
`encode_records` and `EventRecord.encode` write a record, `EventRecord.decode` reads one.
"""

from __future__ import annotations

import base64
import datetime as _dt
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, NamedTuple, cast

import msgpack

from tidings.core.channels import CHANNEL_BYTES_MAX, validate_channel
from tidings.core.errors import AttributesError, TidingsError

try:
    from tidings.core import _records  # the compiled check of peers' records (setup.py): optional
except ImportError:  # built where no C compiler was found: the checks in Python alone
    _records = None  # type: ignore[assignment]

AttrValue = str | int | float | bool
ATTRIBUTES_MAX = 64
ATTRIBUTE_KEY_BYTES_MAX = 128
ATTRIBUTE_STRING_BYTES_MAX = 4096
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
TICK_MAX = 2**63 - 1  # the last tick ("forever"): a tick is a signed 64-bit integer (a Spark long)

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class EventRecord(NamedTuple):
    """The fields of a logged event record, in their order on the log and on the wire."""

    pubend: str
    tick: int
    channel: str
    attributes: dict[str, AttrValue]
    service: str
    instance: str
    payload: bytes
    authenticated: bool = False  # encoded only when true (an anonymous record has seven fields)

    def encode(self, pack: Callable[[object], bytes] = msgpack.packb) -> bytes:
        return pack(self if self.authenticated else self[:PAYLOAD + 1])

    @classmethod
    def decode(cls, record: bytes) -> EventRecord:
        """The record's fields; raises ValueError (msgpack's errors are ValueErrors too) when the
        bytes are not a record. The field types are not checked (`event_from_fields` does)."""
        return cls.of(msgpack.unpackb(record, use_list=False))

    @classmethod
    def of(cls, fields: object) -> EventRecord:
        """The record whose decoded array is `fields` (7 or 8 elements; else ValueError)."""
        if not isinstance(fields, list | tuple) or len(fields) not in RECORD_LENGTHS:
            raise ValueError("an event record is a 7-element array, or 8 with the authenticated flag")
        return tuple.__new__(cls, fields if len(fields) == len(cls._fields) else (*fields, False))


# positions of the fields in a decoded record (a raw list), for the hot paths that index one
PUBEND: Final = EventRecord._fields.index("pubend")
TICK: Final = EventRecord._fields.index("tick")
CHANNEL: Final = EventRecord._fields.index("channel")
ATTRIBUTES: Final = EventRecord._fields.index("attributes")
SERVICE: Final = EventRecord._fields.index("service")
INSTANCE: Final = EventRecord._fields.index("instance")
PAYLOAD: Final = EventRecord._fields.index("payload")
AUTHENTICATED: Final = EventRecord._fields.index("authenticated")
RECORD_LENGTHS = (PAYLOAD + 1, AUTHENTICATED + 1)  # without and with the authenticated flag


def encode_records(pack: Callable[[object], bytes], pubend: str, first: int,
                   events: Iterable[tuple[str, dict[str, AttrValue], bytes]], service: str, instance: str,
                   authenticated: bool) -> list[tuple[int, bytes]]:
    """(tick, record) for each (channel, attributes, payload) of `events`, at ticks `first`,
    `first + 1`, ...: the intake's one encoding of what it logs."""
    stamped = enumerate(events, first)
    if authenticated:  # the flag, or nothing: not authenticated
        return [(t, pack([pubend, t, ch, at, service, instance, pl, True])) for t, (ch, at, pl) in stamped]
    # (two loops: the per-event cost of building the list with or without the flag is measurable)
    return [(t, pack([pubend, t, ch, at, service, instance, pl])) for t, (ch, at, pl) in stamped]


# the exact types of an attribute's value (`_check_value`): a value of one of them equal to one seen
# valid is valid (the intake's and the subscription table's memo of one-attribute events rely on it)
VALUE_TYPES: frozenset[type] = frozenset((str, int, float, bool))

OneAttribute = tuple[str, object, type]  # (name, value, the value's exact type)


def one_attribute(attributes: object) -> OneAttribute | None:
    """The key of a map of exactly one attribute whose name is a str and whose value has one of
    VALUE_TYPES (an MQTT QoS 0 event's `mqtt.qos`); None for any other map. Two maps of one key
    validate and match alike (the intake's memo of valid ones, the table's matches per sync)."""
    if type(attributes) is not dict or len(attributes) != 1:
        return None
    ((name, value),) = attributes.items()
    kind = type(value)
    return (name, value, kind) if type(name) is str and kind in VALUE_TYPES else None


def validate_attributes(attributes: object) -> dict[str, AttrValue]:
    """Return attributes as a plain dict if every key is a string and every value a str, int,
    float or bool (msgpack-representable, finite floats only); else raise naming the offender."""
    if attributes is None:
        return {}
    if type(attributes) is not dict and not isinstance(attributes, Mapping):  # (a dict: no ABC check)
        raise AttributesError(f"attributes must be a map, not {type(attributes).__name__}")
    if len(attributes) > ATTRIBUTES_MAX:
        raise AttributesError(f"an event has at most {ATTRIBUTES_MAX} attributes, got {len(attributes)}")
    out: dict[str, AttrValue] = {}
    for key, value in attributes.items():
        if not isinstance(key, str) or not key:
            raise AttributesError(f"attribute names must be non-empty strings, got {key!r}")
        if len(key) > ATTRIBUTE_KEY_BYTES_MAX:
            raise AttributesError(f"attribute name {key[:20]!r}... is longer than {ATTRIBUTE_KEY_BYTES_MAX}")
        _check_value(key, value)
        out[key] = value
    return out


def _check_value(key: str, value: object) -> None:
    if isinstance(value, str):
        if len(value) > ATTRIBUTE_STRING_BYTES_MAX:
            raise AttributesError(f"attribute {key!r} is longer than {ATTRIBUTE_STRING_BYTES_MAX}")
    elif isinstance(value, bool):
        pass
    elif isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise AttributesError(f"attribute {key!r} = {value} does not fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise AttributesError(f"attribute {key!r} is not a finite number")
    else:
        raise AttributesError(f"attribute {key!r} has type {type(value).__name__}; use str, int, float or bool")


def tick_to_datetime(tick: int) -> _dt.datetime:
    return _EPOCH + _dt.timedelta(microseconds=tick)


def datetime_to_tick(when: _dt.datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(frozen=True, slots=True)
class Event:
    """One published event as a subscriber sees it."""

    pubend: str
    tick: int
    channel: str
    attributes: dict[str, AttrValue]
    service: str
    instance: str
    payload: bytes
    authenticated: bool = False  # whether the source proved its identity to its broker

    @property
    def time(self) -> _dt.datetime:
        return tick_to_datetime(self.tick)

    def to_json(self) -> dict[str, Any]:
        """The JSON object `tidings sub` prints: payload as text when UTF-8, else base64."""
        out: dict[str, Any] = {
            "channel": self.channel,
            "pubend": self.pubend,
            "tick": self.tick,
            "time": self.time.isoformat().replace("+00:00", "Z"),
            "source": {"service": self.service, "instance": self.instance, "authenticated": self.authenticated},
            "attributes": self.attributes,
        }
        try:
            out["payload"] = self.payload.decode("utf-8")
        except UnicodeDecodeError:
            out["payload"] = base64.b64encode(self.payload).decode("ascii")
            out["payload_encoding"] = "base64"
        return out


def event_from_fields(fields: object) -> Event:
    """Build an Event from a decoded record; raises ValueError if the shape is wrong."""
    if not isinstance(fields, list) or len(fields) not in RECORD_LENGTHS:
        raise ValueError("an event record is a 7-element array, or 8 with the authenticated flag")
    pubend, tick, channel, attributes, service, instance, payload = fields[:PAYLOAD + 1]
    authenticated = fields[AUTHENTICATED] if len(fields) > AUTHENTICATED else False
    if not (isinstance(pubend, str) and isinstance(tick, int) and isinstance(channel, str)
            and isinstance(attributes, dict) and isinstance(service, str)
            and isinstance(instance, str) and isinstance(payload, bytes) and type(authenticated) is bool):
        raise ValueError("an event record has a field of the wrong type")
    return Event(pubend, tick, channel, attributes, service, instance, payload, authenticated)


_ARRAY_HEADERS = (0x97, 0x98)  # msgpack's fixarray of 7 and of 8


def own_record_prefix(pubend: str) -> bytes:
    """The bytes that follow the array header of every record `pubend` logs: its pubend."""
    return bytes(msgpack.packb(pubend))


def record_channel_bytes(record: bytes, prefix: bytes) -> bytes | None:
    """The UTF-8 bytes of the channel of a record whose pubend is `prefix` (own_record_prefix), read
    in place without decoding the record: a broker sorting thousands of its own records needs only
    their channels. Only the usual layout is read so (a 7- or 8-element array, a tick past 2**32, so
    a uint64; a channel under 256 bytes); None for any other, which the caller decodes in full."""
    at = 1 + len(prefix) + 9  # the channel follows the tick: 0xCF and 8 bytes
    if (len(record) <= at + 1 or record[0] not in _ARRAY_HEADERS or not record.startswith(prefix, 1)
            or record[at - 9] != 0xCF):
        return None
    head = record[at]
    if 0xA0 <= head <= 0xBF:  # fixstr
        return record[at + 1:at + 1 + (head & 0x1F)]
    if head == 0xD9:  # str8
        return record[at + 2:at + 2 + record[at + 1]]
    return None


def record_routing_fields(record: object) -> EventRecord | None:
    """The fields of an encoded event record that came from another broker, with what routing reads
    (pubend, tick, channel, attributes, payload, the flag) checked, or None when it is not a
    well-formed record: peers are checked like clients. (A subscriber's broker runs this for every
    record it delivers, so the positions are literals here, held to EventRecord's below.)"""
    if type(record) is not bytes:
        return None
    try:
        fields = msgpack.unpackb(record, use_list=False)
    except Exception:  # msgpack raises several types for garbage
        return None
    if type(fields) is not tuple or len(fields) not in RECORD_LENGTHS:
        return None
    channel = fields[2]
    if (type(fields[0]) is not str or type(fields[1]) is not int or type(fields[6]) is not bytes
            or (len(fields) == 8 and type(fields[7]) is not bool)
            or type(channel) is not str or len(channel) > CHANNEL_BYTES_MAX or not _valid_channel(channel)):
        return None
    try:
        if fields[3] or type(fields[3]) is not dict:  # (an empty map is valid: not looked at)
            validate_attributes(fields[3])  # a decoded map is a plain dict already: kept as it is
    except TidingsError:
        return None
    if fields[3] is None:  # nil reads as no attributes
        fields = (*fields[:3], {}, *fields[4:])
    return tuple.__new__(EventRecord, fields if len(fields) == 8 else fields + _FLAG_ABSENT)


_FLAG_ABSENT = (False,)


CHECK_RECORDS_MAX = 1024  # records decoded at once: their objects stay in the CPU's caches (a catch-up's
# message holds 6,000: checked whole, 0.55 µs a record; in parts of 1,024, 0.39 µs)


def records_routing_fields(pubends: tuple[str, ...],
                           records: Sequence[object]) -> list[tuple[str, dict[str, Any]]] | None:
    """(channel, attributes) of each of a batch of records from other brokers, record `i` from
    `pubends[i]`, when every one passes record_routing_fields' checks with that pubend; None when
    any does not (the caller then checks them one by one, to keep the good ones). The same checks
    as record_routing_fields, run as a few passes over the batch in C (map, set) rather than
    Python's steps per record: a subscriber's broker catching up takes records by the thousand,
    all well-formed, from a handful of channels, mostly without attributes. The compiled check
    (_records.c) answers first where it is built and switched on: it reads the usual layout in
    place, and says None (the checks below then run) for anything else."""
    if _compiled is not None and (compiled := _compiled_routing_fields(pubends, records)) is not None:
        return compiled
    if len(records) <= CHECK_RECORDS_MAX:
        return _routing_fields(pubends, records)
    routed: list[tuple[str, dict[str, Any]]] = []
    for at in range(0, len(records), CHECK_RECORDS_MAX):
        part = _routing_fields(pubends[at:at + CHECK_RECORDS_MAX], records[at:at + CHECK_RECORDS_MAX])
        if part is None:
            return None
        routed += part
    return routed


def _compiled_routing_fields(pubends: tuple[str, ...],
                             records: Sequence[object]) -> list[tuple[str, dict[str, Any]]] | None:
    """The compiled check's answer for records of one pubend, with its channels checked as names;
    None when it has none (another layout, several pubends, a record refused)."""
    if (type(records) is not list or not records or len(pubends) != len(records)
            or pubends.count(pubends[0]) != len(pubends)):
        return None
    assert _compiled is not None
    answer = _compiled(records, _own_prefix(pubends[0]))
    if answer is None:
        return None
    routed, channels = answer
    for channel in set(channels):
        if len(channel) > CHANNEL_BYTES_MAX or not _valid_channel(channel):
            return None
    return routed


def use_native(on: bool) -> None:
    """records_routing_fields asks the compiled check first when `on` and it is built (the runtime's
    switch: off with TIDINGS_NATIVE_RECORDS=0, aio/server.py)."""
    global _compiled  # noqa: PLW0603 - the one switch, set by the runtime at start
    _compiled = None if not on or _records is None else _records.routing


def native() -> bool:
    """Whether records_routing_fields asks the compiled check first."""
    return _compiled is not None


@lru_cache(maxsize=64)
def _own_prefix(pubend: str) -> bytes:
    return own_record_prefix(pubend)


def _routing_fields(pubends: tuple[str, ...],
                    records: Sequence[object]) -> list[tuple[str, dict[str, Any]]] | None:
    if not records or set(map(type, records)) != _BYTES_ONLY:
        return None
    try:  # (lists, not tuples: unpackb's keywords cost 0.15 µs a call)
        fields: list[Any] = list(map(msgpack.unpackb, cast("Sequence[bytes]", records)))
    except Exception:  # msgpack raises several types for garbage
        return None
    columns = _columns(pubends, fields)
    if columns is None:
        return None
    channels, attributes = columns
    if set(map(type, channels)) != _STR_ONLY or not all(
            len(channel) <= CHANNEL_BYTES_MAX and _valid_channel(channel) for channel in set(channels)):
        return None
    valid = _valid_attributes(attributes)
    return None if valid is None else list(zip(channels, valid, strict=True))


def _columns(pubends: tuple[str, ...], fields: list[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """The channels and attributes of decoded records `fields`, if each is an array of a record's
    length with the pubend of its place in `pubends` (a str equals a str alone), an int tick,
    bytes of payload, and a boolean flag if it has one; else None."""
    if set(map(type, fields)) != _LIST_ONLY:
        return None
    lengths = set(map(len, fields))
    if not lengths <= _RECORD_LENGTH_SET:
        return None
    columns = list(zip(*fields, strict=False))  # field by field (the first 7 of each; all 8 when every one has 8)
    if (columns[PUBEND] != pubends or set(map(type, columns[TICK])) != _INT_ONLY
            or set(map(type, columns[PAYLOAD])) != _BYTES_ONLY):
        return None
    if AUTHENTICATED + 1 in lengths:
        flags = columns[AUTHENTICATED] if len(lengths) == 1 else [f[-1] for f in fields if len(f) > AUTHENTICATED]
        if set(map(type, flags)) != _BOOL_ONLY:
            return None
    return columns[CHANNEL], columns[ATTRIBUTES]


def _valid_attributes(attributes: tuple[Any, ...]) -> Sequence[Any] | None:
    """Records' attributes (each a valid map, nil read as none), or None if one is not valid."""
    if not any(attributes) and set(map(type, attributes)) == _DICT_ONLY:  # all empty maps: not looked at
        return attributes
    valid = list(attributes)
    for at, given in enumerate(attributes):
        if given or type(given) is not dict:
            try:
                validate_attributes(given)  # a decoded map is a plain dict already: kept as it is
            except TidingsError:
                return None
            if given is None:
                valid[at] = {}
    return valid


_BYTES_ONLY, _LIST_ONLY, _STR_ONLY, _INT_ONLY, _DICT_ONLY, _BOOL_ONLY = (
    {t} for t in (bytes, list, str, int, dict, bool))
_RECORD_LENGTH_SET = set(RECORD_LENGTHS)
_compiled: Callable[[list[object], bytes], tuple[list[tuple[str, dict[str, Any]]], list[str]] | None] | None = (
    None if _records is None else _records.routing)


@lru_cache(maxsize=4096)
def _valid_channel(channel: str) -> bool:
    """Whether a record's channel is a valid channel name (validate_channel), remembered: a
    subscriber's broker sees the same few channels in record after record. Only strings short
    enough to be valid are asked, so the cache holds at most 4,096 of at most 1,024 characters."""
    try:
        validate_channel(channel)
    except TidingsError:
        return False
    return True
assert (PUBEND, TICK, CHANNEL, ATTRIBUTES, PAYLOAD, AUTHENTICATED, RECORD_LENGTHS) == (0, 1, 2, 3, 6, 7, (7, 8))
