"""The fixed schema of a tidings read and the decoding of a bulk read's records into Arrow record
batches.

Every column is NOT NULL, because every event has every field: a channel, its pubend and tick (so
its time), the source (service, instance) and whether it authenticated (false for a record without
the flag: an anonymous source's, and every record logged before the flag existed), an attribute map
(perhaps empty) whose values are never missing, and a payload (perhaps empty). Saying so lets
Spark drop null checks, and it is what the Arrow batches carry: Spark rejects a batch whose Arrow
schema is not exactly the one it derives from the declared schema, so that Arrow schema is derived
with Spark's own `to_arrow_schema`, never written by hand.

Attribute values are rendered as strings, so one map type holds them all:

- a string as it is;
- a boolean as `true` or `false`;
- an integer in decimal (`3`, `-12`);
- a float as the shortest decimal that reads back to the same float (`2.5`, `3.0`, `1e+20`),
  so `CAST(attributes['load'] AS DOUBLE)` gives back the published value exactly.
"""

from __future__ import annotations

import functools
import gc
import operator
import os
from collections.abc import Callable
from itertools import accumulate, chain, compress
from typing import Any, TypeVar

import msgpack
import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no stubs (pyarrow-stubs is not a dependency)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidings.core.channels import pattern_matches
from tidings.core.event import AUTHENTICATED, RECORD_LENGTHS, TICK_MAX
from tidings.storage.record import SpanError, records_in

try:
    from tidings.spark import _columns  # the compiled fast path (setup.py): optional
except ImportError:  # built where no C compiler was found: every record is decoded in Python
    _columns = None
if os.environ.get("TIDINGS_NATIVE_DECODE") == "0":  # the Python decoder alone (docs/spark.md)
    _columns = None

EVENT_SCHEMA = StructType([
    StructField("channel", StringType(), nullable=False),
    StructField("pubend", StringType(), nullable=False),
    StructField("tick", LongType(), nullable=False),
    StructField("time", TimestampType(), nullable=False),
    StructField("source_service", StringType(), nullable=False),
    StructField("source_instance", StringType(), nullable=False),
    StructField("source_authenticated", BooleanType(), nullable=False),
    StructField("attributes", MapType(StringType(), StringType(), valueContainsNull=False), nullable=False),
    StructField("payload", BinaryType(), nullable=False),
])


def arrow_schema(schema: StructType = EVENT_SCHEMA) -> pa.Schema:
    """The Arrow schema Spark expects for batches of `schema`, timestamps in UTC."""
    return to_arrow_schema(schema, timezone="UTC")


def check_schema(schema: StructType) -> None:
    """Accept a user-given schema (`spark.read.format("tidings").schema(...)`) that names some of
    EVENT_SCHEMA's columns, each once and with its type, in any order (it may declare them
    nullable): a read then builds and hands Spark only those columns. Spark's Python data sources
    are not told which columns a query uses, so this is how a job leaves out, say, the payload."""
    fixed = {f.name: f.dataType.simpleString() for f in EVENT_SCHEMA}
    names = [f.name for f in schema]
    wrong = [f.name for f in schema if fixed.get(f.name) != f.dataType.simpleString()]
    if not names or wrong or len(set(names)) != len(names):
        problem = ("no column" if not names else f"{', '.join(wrong)} not as in the event schema" if wrong
                   else "a column named twice")
        raise ValueError(f"tidings: a read's schema takes some of the columns {EVENT_SCHEMA.simpleString()}, "
                         f"each once with its type; got {schema.simpleString()} ({problem})")


def render_attribute(value: object) -> str:
    """An attribute value as the string the `attributes` map holds (see the module docstring)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return str(value)  # the broker admits no other type; render rather than fail a whole read


_NUMBERS = {int, float}
_matches = functools.lru_cache(maxsize=4096)(pattern_matches)  # a read's frames share their channels
_T = TypeVar("_T")


class RecordsError(ValueError):
    """RECORDS from the broker that are not what a read asked for (the broker is a peer)."""


def records_to_batch(blob: bytes, count: int, schema: pa.Schema, pubend: str, after: int, end: int
                     ) -> tuple[pa.RecordBatch, int]:
    """One record batch of `schema`, and its last tick, from the RECORDS blob of a bulk read of
    `pubend`'s ticks `(after, end]`: a msgpack array of `count` event records as logged (_decode)."""
    decoded = _compiled(blob, count, schema, pubend, after, end, None)
    batch, last = decoded or _without_collector(_decode, blob, count, schema, pubend, after, end, None)
    assert batch is not None  # (only a pattern leaves rows out)
    return batch, last


def span_to_batch(span: bytes, schema: pa.Schema, pubend: str, pattern: str, after: int, through: int
                  ) -> pa.RecordBatch | None:
    """One record batch of `schema` from a SPAN of `pubend`'s log: its records with after < tick <=
    through (storage.record.records_in checks their bounds, tick order and checksums) whose
    channel matches `pattern` (the broker sent every channel's); None when none does."""
    decoded = _compiled(span, -1, schema, pubend, after, through, pattern)
    return decoded[0] if decoded else _without_collector(_span_to_batch, span, schema, pubend, pattern, after, through)


_WANT = {"attributes": 1, "source_service": 2, "source_instance": 4, "payload": 8,  # _columns.decode's bits
         "source_authenticated": 16}


def _compiled(buffer: bytes, count: int, schema: pa.Schema, pubend: str, after: int, through: int,
              pattern: str | None) -> tuple[pa.RecordBatch | None, int] | None:
    """What _decode (count >= 0: RECORDS) or _span_to_batch (count < 0: a SPAN) gives, from the
    compiled decoder (_columns.c): the column buffers it fills are wrapped as Arrow arrays without
    a copy. None when it is not built, or leaves these records to the Python decoder (anything but
    the usual valid records): that one then decides, and names any problem."""
    if _columns is None or not 0 <= after <= through <= TICK_MAX:
        return None
    names = set(schema.names)
    decoded = _columns.decode(buffer, count, pubend, after, through,
                              sum(bit for name, bit in _WANT.items() if name in names))
    if decoded is None:
        return None
    rows, last, ticks, *buffers = decoded
    if not rows:
        return None, last
    flags = buffers.pop()  # a bitmap
    pairs = buffers.pop()  # each event's end in the attribute names and values
    channels, services, instances, keys, values, payloads = zip(buffers[::2], buffers[1::2], strict=True)

    def array(kind: pa.DataType, offsets_and_data: tuple[bytes, bytes], length: int = rows) -> pa.Array:
        return pa.Array.from_buffers(kind, length, [None, *map(pa.py_buffer, offsets_and_data)])

    channel = array(pa.string(), channels)
    tick = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(ticks)])
    batch = _batch(schema, pubend, tick, {
        "channel": channel.cast,
        "source_service": lambda t: array(pa.string(), services).cast(t),
        "source_instance": lambda t: array(pa.string(), instances).cast(t),
        "source_authenticated": lambda t: pa.Array.from_buffers(pa.bool_(), rows, [None, pa.py_buffer(flags)]),
        "attributes": lambda t: pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), rows + 1, [None, pa.py_buffer(pairs)]),
            array(pa.string(), keys, len(keys[0]) // 4 - 1), array(pa.string(), values, len(values[0]) // 4 - 1),
        ).cast(t),
        "payload": lambda t: array(pa.binary(), payloads).cast(t),
    })
    if pattern is not None:  # tested once per distinct channel
        distinct = channel.dictionary_encode()
        hits = pa.array([_matches(pattern, name) for name in distinct.dictionary.to_pylist()], pa.bool_())
        if hits.false_count:
            batch = batch.filter(hits.take(distinct.indices))
            if not batch.num_rows:
                return None, last
    return batch, last


def _span_to_batch(span: bytes, schema: pa.Schema, pubend: str, pattern: str, after: int, through: int
                   ) -> pa.RecordBatch | None:
    try:
        bodies = records_in(span, after, through)
    except SpanError as exc:
        raise RecordsError(f"a SPAN that is not whole valid records: {exc}") from None
    if not bodies:
        return None
    blob = b"".join([_ARRAY32, len(bodies).to_bytes(4, "big"), *bodies])  # one msgpack array of them
    return _decode(blob, len(bodies), schema, pubend, after, through, pattern)[0]


_ARRAY32 = b"\xdd"  # msgpack: an array of a 32-bit count


def _without_collector(decode: Callable[..., _T], *args: Any) -> _T:
    """`decode(*args)` with the cyclic garbage collector paused: decoding makes thousands of
    containers, none in a cycle and all freed (by reference counting) before it resumes, so the
    collector would only walk them (about a third of the decoding time)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return decode(*args)
    finally:
        if collecting:
            gc.enable()


def _decode(blob: bytes, count: int, schema: pa.Schema, pubend: str, after: int, end: int,
            pattern: str | None) -> tuple[pa.RecordBatch | None, int]:
    """One record batch of `schema` (None if no record is left), and the last tick, from a msgpack
    array of `count` event records of `pubend`'s ticks `(after, end]` as logged,
    `[pubend, tick, channel, attributes, service, instance, payload]` and perhaps the authenticated
    flag; with `pattern`, of those whose channel matches it (tested once per distinct channel).

    The read's hot loop, done column by column rather than event by event: one msgpack call
    decodes the whole blob, the records are transposed into columns by `zip`, and every check a
    peer's data needs (shapes, types, ticks rising inside the range, the pubend) is a C-speed pass
    over a column. Attribute values are rendered by one `repr` pass when all are numbers, else
    those that are not strings one by one. RecordsError names the first problem.
    """
    try:
        rows = msgpack.unpackb(blob, use_list=False)  # tuples: built in half the time of lists
    except Exception as exc:  # msgpack raises several types for garbage
        raise RecordsError(f"RECORDS that are not msgpack ({type(exc).__name__})") from None
    if type(rows) is not tuple or len(rows) != count or not rows:
        raise RecordsError(f"RECORDS said {count} records and held {len(rows) if type(rows) is tuple else rows!r}")
    if set(map(type, rows)) != {tuple} or not set(map(len, rows)) <= set(RECORD_LENGTHS):
        raise RecordsError("RECORDS whose records are not 7-element arrays (8 with the authenticated flag)")
    pubends, ticks, channels, attributes, services, instances, payloads, flags = _transpose(rows)
    last = ticks[-1]
    if pattern is not None:
        if set(map(type, channels)) != {str}:
            raise RecordsError("RECORDS with a channel that is not str")
        hits = {channel: _matches(pattern, channel) for channel in set(channels)}
        if not all(hits.values()):
            rows = tuple(compress(rows, map(hits.__getitem__, channels)))
            if not rows:
                return None, last
            count = len(rows)
            pubends, ticks, channels, attributes, services, instances, payloads, flags = _transpose(rows)
    if pubends.count(pubend) != count:  # (only a str equals a str: the column's type is checked too)
        raise RecordsError(f"RECORDS of another pubend than {pubend}")
    # A frame's source is often one publisher: a column of one string is checked and built as one.
    alike = {name: column.count(column[0]) == count and type(column[0]) is str
             for name, column in (("source_service", services), ("source_instance", instances))}
    built = set(schema.names)  # the other columns are not looked at, beyond the record's shape
    for column, kind, name in ((ticks, int, "tick"), (channels, str, "channel"), (attributes, dict, "attributes"),
                               (services, str, "source_service"), (instances, str, "source_instance"),
                               (payloads, bytes, "payload")):
        if (name in built or name == "tick") and not alike.get(name) and set(map(type, column)) != {kind}:
            raise RecordsError(f"RECORDS with a {name.removeprefix('source_')} that is not {kind.__name__}")
    if not (after < ticks[0] and ticks[-1] <= end and all(map(operator.lt, ticks, ticks[1:]))):
        raise RecordsError(f"RECORDS with ticks {ticks[0]}..{ticks[-1]} out of order or outside ({after}, {end}]")
    try:
        return _batch(schema, pubend, pa.array(ticks, type=pa.int64()), {
            "channel": lambda t: pa.array(channels, type=t),
            "source_service": lambda t: _strings(services, t, alike["source_service"]),
            "source_instance": lambda t: _strings(instances, t, alike["source_instance"]),
            "source_authenticated": lambda t: (pa.repeat(pa.scalar(False, t), count) if flags is None
                                               else pa.array(flags, type=t)),
            "attributes": lambda t: _attributes_array(attributes, t),
            "payload": lambda t: pa.array(payloads, type=t),
        }), last
    except (pa.ArrowException, OverflowError) as exc:  # a tick or value past 64 bits
        raise RecordsError(f"RECORDS that do not fit the read's columns: {exc}") from None


def _transpose(rows: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
    """The columns of records of 7 or 8 elements, in EventRecord's order (core/event.py): the
    eighth, the authenticated flags, is None when no record has one (all false), else False where a
    record lacks it. RecordsError for a flag that is not a bool."""
    lengths = set(map(len, rows))
    if lengths == {RECORD_LENGTHS[0]}:  # none has the flag
        return (*zip(*rows, strict=True), None)
    if lengths == {RECORD_LENGTHS[1]}:  # every one has it
        columns = tuple(zip(*rows, strict=True))
    else:
        columns = (*zip(*(row[:AUTHENTICATED] for row in rows), strict=True),
                   tuple(row[AUTHENTICATED] if len(row) > AUTHENTICATED else False for row in rows))
    if not set(map(type, columns[AUTHENTICATED])) <= {bool}:
        raise RecordsError("RECORDS with an authenticated flag that is not bool")
    return columns


def _batch(schema: pa.Schema, pubend: str, ticks: pa.Array,
           columns: dict[str, Callable[[pa.DataType], pa.Array]]) -> pa.RecordBatch:
    """The record batch of `schema` for events of `pubend` with `ticks` (int64), both decoders'
    last step: `columns` makes each event column the schema names from its Arrow type; the pubend,
    tick and time columns are made here."""
    fixed: dict[str, Callable[[pa.DataType], pa.Array]] = {
        "pubend": lambda t: pa.repeat(pa.scalar(pubend, t), len(ticks)),
        "tick": ticks.cast,
        "time": ticks.cast,  # a tick is microseconds since the epoch: the timestamp itself
    }
    return pa.RecordBatch.from_arrays([(fixed.get(f.name) or columns[f.name])(f.type) for f in schema],
                                      schema=schema)


def _strings(column: tuple[str, ...], string_type: pa.DataType, alike: bool) -> pa.Array:
    """A string array of `column`; built from its first value when all are `alike`."""
    return pa.repeat(pa.scalar(column[0], string_type), len(column)) if alike else pa.array(column, type=string_type)


def _attributes_array(attributes: tuple[dict[Any, Any], ...], map_type: pa.DataType) -> pa.Array:
    """The map array of `map_type` (its key and value types, its nullability) of the attribute
    maps, every value rendered as a string (render_attribute): flat lists of keys, values and
    offsets, each made by one pass. RecordsError for a name that is not a string."""
    keys = list(chain.from_iterable(attributes))
    if keys and set(map(type, keys)) != {str}:
        raise RecordsError("RECORDS with an attribute name that is not a string")
    values = list(chain.from_iterable(map(dict.values, attributes)))
    kinds = set(map(type, values))
    if kinds <= _NUMBERS:  # rendered by repr (a bool is neither)
        values = list(map(repr, values))
    elif kinds != {str}:
        values = [v if type(v) is str else render_attribute(v) for v in values]
    offsets = list(accumulate(map(len, attributes), initial=0))
    array = pa.MapArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(keys, type=map_type.key_type),
                                    pa.array(values, type=map_type.item_type))
    return array.cast(map_type)
