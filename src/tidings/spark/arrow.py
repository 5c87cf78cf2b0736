"""The fixed schema of a tidings read and the conversion of events to Arrow record batches.

Every column is NOT NULL, because every event has every field: a channel, its pubend and tick (so
its time), the authenticated source (service, instance), an attribute map (perhaps empty) whose
values are never missing, and a payload (perhaps empty). Saying so lets Spark drop null checks, and
it is what the Arrow batches carry: Spark rejects a batch whose Arrow schema is not exactly the one
it derives from the declared schema, so that Arrow schema is derived with Spark's own
`to_arrow_schema`, never written by hand.

Attribute values are rendered as strings, so one map type holds them all:

- a string as it is;
- a boolean as `true` or `false`;
- an integer in decimal (`3`, `-12`);
- a float as the shortest decimal that reads back to the same float (`2.5`, `3.0`, `1e+20`),
  so `CAST(attributes['load'] AS DOUBLE)` gives back the published value exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    from tidings.core.event import Event

BATCH_ROWS_MAX = 4096

EVENT_SCHEMA = StructType([
    StructField("channel", StringType(), nullable=False),
    StructField("pubend", StringType(), nullable=False),
    StructField("tick", LongType(), nullable=False),
    StructField("time", TimestampType(), nullable=False),
    StructField("source_service", StringType(), nullable=False),
    StructField("source_instance", StringType(), nullable=False),
    StructField("attributes", MapType(StringType(), StringType(), valueContainsNull=False), nullable=False),
    StructField("payload", BinaryType(), nullable=False),
])


def arrow_schema(schema: StructType = EVENT_SCHEMA) -> pa.Schema:
    """The Arrow schema Spark expects for batches of `schema`, timestamps in UTC."""
    return to_arrow_schema(schema, timezone="UTC")


def check_schema(schema: StructType) -> None:
    """Accept a user-given schema only if it names and types the columns as EVENT_SCHEMA does
    (it may declare columns nullable); the columns of a tidings read are fixed."""
    if schema.simpleString() != EVENT_SCHEMA.simpleString():
        raise ValueError(
            f"tidings: the schema of a tidings read is fixed: {EVENT_SCHEMA.simpleString()}; "
            f"got {schema.simpleString()}"
        )


def render_attribute(value: object) -> str:
    """An attribute value as the string the `attributes` map holds (see the module docstring)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return str(value)  # the broker admits no other type; render rather than fail a whole read


def events_to_batch(events: Sequence[Event], schema: pa.Schema) -> pa.RecordBatch:
    """One record batch of `events`, in the column order and types of `schema`.

    The read's hot loop in a Spark task (about a quarter of its Python time before it was built
    this way): the attribute map is built from flat key and value lists and offsets rather than a
    list of pairs per event, string values (most of them) are taken as they are, and the time
    column is the tick column viewed as timestamps, not a second conversion.
    """
    ticks = pa.array([e.tick for e in events], type=pa.int64())
    keys: list[str] = []
    values: list[str] = []
    offsets = [0]
    for event in events:
        attributes = event.attributes
        if attributes:
            keys.extend(attributes)
            values.extend([v if type(v) is str else render_attribute(v) for v in attributes.values()])
        offsets.append(len(keys))
    columns: dict[str, Callable[[pa.DataType], pa.Array]] = {
        "channel": lambda t: pa.array([e.channel for e in events], type=t),
        "pubend": lambda t: pa.array([e.pubend for e in events], type=t),
        "tick": ticks.cast,
        "time": ticks.cast,  # a tick is microseconds since the epoch: the timestamp itself
        "source_service": lambda t: pa.array([e.service for e in events], type=t),
        "source_instance": lambda t: pa.array([e.instance for e in events], type=t),
        "attributes": lambda t: _map_array(offsets, keys, values, t),
        "payload": lambda t: pa.array([e.payload for e in events], type=t),
    }
    arrays = [columns[field.name](field.type) for field in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _map_array(offsets: list[int], keys: list[str], values: list[str], map_type: pa.DataType) -> pa.Array:
    """A map array of `map_type` (its key and value types, its nullability) from flat lists."""
    array = pa.MapArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(keys, type=map_type.key_type),
                                    pa.array(values, type=map_type.item_type))
    return array.cast(map_type)


def events_to_batches(
    events: Iterable[Event], schema: pa.Schema, rows_max: int = BATCH_ROWS_MAX
) -> Iterator[pa.RecordBatch]:
    """Record batches of at most `rows_max` rows; none when there are no events."""
    assert rows_max >= 1
    pending: list[Event] = []
    for event in events:
        pending.append(event)
        if len(pending) >= rows_max:
            yield events_to_batch(pending, schema)
            pending = []
    if pending:
        yield events_to_batch(pending, schema)
