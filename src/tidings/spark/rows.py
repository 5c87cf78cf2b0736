"""What the sink writes: the DataFrame's columns, checked on the driver, and each row as an event.

Theory of operation. A row is an event to publish: `channel` (string, required), `payload` (binary
or string, required; a null payload is an empty one), `attributes` (optional, map<string, scalar>:
string, integer, floating point or boolean values, as the event's typed attributes; an entry whose
value is null is left out, as if the map did not hold it) and `key` (optional: string, binary or
integer; it names the event for idempotence, producer.py). Any other column is refused: the sink
would otherwise drop it without a word.

The schema is checked once, on the driver, when Spark asks for the writer, so a wrong column fails
`save()`/`start()` with one line naming it before any task runs. A row the schema allows but the
broker would refuse (a null channel, a channel with a wildcard, a NaN attribute) fails its task
with a message naming the row; nothing is skipped. Pure functions, no broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from tidings.core.channels import validate_channel
from tidings.core.event import validate_attributes
from tidings.spark.producer import key_seq

COLUMNS = ("channel", "payload", "attributes", "key")
_INTEGERS = (LongType, IntegerType, ShortType, ByteType)
_SCALARS = (StringType, *_INTEGERS, DoubleType, FloatType, BooleanType)
_KEYS = (StringType, BinaryType, *_INTEGERS)


class RowError(ValueError):
    """A row that cannot be published as an event."""


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """Where each of the sink's columns is in the DataFrame (None: absent)."""

    channel: int
    payload: int
    attributes: int | None
    key: int | None


def check_sink_schema(schema: StructType) -> SinkColumns:
    """The positions of the sink's columns in `schema`; ValueError with one line naming the first
    column that is missing, of the wrong type, or not one of the sink's."""
    names = [field.name for field in schema.fields]
    extra = [name for name in names if name not in COLUMNS]
    if extra:
        raise ValueError(f"tidings sink: unexpected column(s) {', '.join(map(repr, extra))}; the sink writes "
                         "channel (string), payload (binary or string) and optionally attributes "
                         "(map<string, scalar>) and key: select those")
    if len(set(names)) != len(names):
        raise ValueError(f"tidings sink: a column appears twice in {names}")
    types = {field.name: field.dataType for field in schema.fields}
    for name, allowed, wanted in (("channel", (StringType,), "string"),
                                  ("payload", (BinaryType, StringType), "binary or string")):
        if name not in types:
            raise ValueError(f"tidings sink: column {name!r} ({wanted}) is required; the columns are {names}")
        if not isinstance(types[name], allowed):
            raise ValueError(f"tidings sink: column {name!r} must be {wanted}, got {_show(types[name])}")
    attributes = types.get("attributes")
    if attributes is not None and not (isinstance(attributes, MapType) and isinstance(attributes.keyType, StringType)
                                       and isinstance(attributes.valueType, _SCALARS)):
        raise ValueError("tidings sink: column 'attributes' must be map<string, string|bigint|int|double|float|"
                         f"boolean>, got {_show(attributes)}")
    key = types.get("key")
    if key is not None and not isinstance(key, _KEYS):
        raise ValueError(f"tidings sink: column 'key' must be string, binary or an integer type, got {_show(key)}")
    return SinkColumns(names.index("channel"), names.index("payload"),
                       names.index("attributes") if attributes is not None else None,
                       names.index("key") if key is not None else None)


def _show(data_type: DataType) -> str:
    return str(data_type.simpleString())


def row_event(channel: Any, payload: Any, attributes: Any = None) -> tuple[str, bytes | str, dict[str, Any] | None]:
    """(channel, payload, attributes) as `publish_many` takes them; RowError when the row cannot be
    an event. The broker checks the channel and attributes again, and the payload's size."""
    if channel is None:
        raise RowError("its channel is null")
    if payload is None:
        payload = b""
    elif not isinstance(payload, bytes | str):
        payload = bytes(payload)  # a bytearray or memoryview from Spark
    return channel, payload, _attributes(attributes)


def _attributes(value: Any) -> dict[str, Any] | None:
    """A Spark map (a dict from Rows, a list of (key, value) pairs from Arrow) without null values."""
    if value is None:
        return None
    pairs = value.items() if isinstance(value, Mapping) else value
    out = {k: v for k, v in pairs if v is not None}
    return out or None


def row_key(key: Any) -> int:
    """The seq a row's `key` names; RowError when it is null or cannot be one."""
    if key is None:
        raise RowError("its key is null (with a key column, every row needs a key)")
    try:
        return key_seq(key)
    except ValueError as exc:
        raise RowError(str(exc)) from None


def row_problem(channel: Any, payload: Any, attributes: Any = None, payload_bytes_max: int | None = None
                ) -> str | None:
    """Why the broker would refuse this row's event (a payload is checked against the broker's
    `event_bytes_max` when it is given); None when nothing is wrong."""
    try:
        event_channel, event_payload, event_attributes = row_event(channel, payload, attributes)
        validate_channel(event_channel)
        validate_attributes(event_attributes)
    except ValueError as exc:
        return str(exc)
    size = len(event_payload.encode() if isinstance(event_payload, str) else event_payload)
    if payload_bytes_max is not None and size > payload_bytes_max:
        return f"its payload of {size} bytes exceeds the broker's event_bytes_max={payload_bytes_max}"
    return None
