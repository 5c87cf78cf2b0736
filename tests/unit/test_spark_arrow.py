"""The fixed schema and the event -> Arrow conversion of the `tidings` data source, without a JVM."""

from __future__ import annotations

import datetime as dt

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402
from pyspark.sql.types import LongType, StructField, StructType  # noqa: E402

from tidings.core.event import Event, datetime_to_tick  # noqa: E402
from tidings.spark.arrow import (  # noqa: E402
    EVENT_SCHEMA,
    arrow_schema,
    check_schema,
    events_to_batch,
    events_to_batches,
    render_attribute,
)

SIMPLE = (
    "struct<channel:string,pubend:string,tick:bigint,time:timestamp,source_service:string,"
    "source_instance:string,attributes:map<string,string>,payload:binary>"
)


def nullable_schema() -> StructType:
    """EVENT_SCHEMA with every column (and map value) nullable, as a user's DDL would give it."""
    as_json = EVENT_SCHEMA.jsonValue()
    for field in as_json["fields"]:
        field["nullable"] = True
        if isinstance(field["type"], dict):
            field["type"]["valueContainsNull"] = True
    return StructType.fromJson(as_json)


def event(tick: int, **attributes: object) -> Event:
    return Event(
        pubend="pe-1", tick=tick, channel=f"nodes/h{tick % 3}/load", attributes=dict(attributes),  # type: ignore[arg-type]
        service="agent", instance=f"i{tick}", payload=bytes([tick % 256]) * (tick % 4),
    )


def test_schema_columns_and_nullability() -> None:
    assert EVENT_SCHEMA.simpleString() == SIMPLE
    assert not any(f.nullable for f in EVENT_SCHEMA.fields)
    assert EVENT_SCHEMA["attributes"].dataType.valueContainsNull is False


def test_arrow_schema_is_sparks_own_derivation() -> None:
    schema = arrow_schema()
    assert schema.equals(to_arrow_schema(EVENT_SCHEMA, timezone="UTC"))
    assert schema.field("time").type == pa.timestamp("us", tz="UTC")
    assert schema.field("tick").type == pa.int64()
    assert not any(f.nullable for f in schema)
    entries = schema.field("attributes").type
    assert not entries.key_field.nullable and not entries.item_field.nullable


def test_check_schema_accepts_only_the_fixed_columns() -> None:
    check_schema(EVENT_SCHEMA)
    check_schema(nullable_schema())  # nullable columns, same names and types: fine
    with pytest.raises(ValueError, match="the schema of a tidings read is fixed"):
        check_schema(StructType.fromJson({"type": "struct", "fields": []}))
    with pytest.raises(ValueError, match="fixed"):
        check_schema(StructType([StructField("tick", LongType())]))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("NY", "NY"),
        ("", ""),
        ("true", "true"),
        (True, "true"),
        (False, "false"),
        (3, "3"),
        (-12, "-12"),
        (2**64 - 1, "18446744073709551615"),
        (2.5, "2.5"),
        (3.0, "3.0"),
        (0.1, "0.1"),
        (1e20, "1e+20"),
        (-1.5e-7, "-1.5e-07"),
    ],
)
def test_render_attribute(value: object, text: str) -> None:
    assert render_attribute(value) == text


def test_float_rendering_round_trips() -> None:
    for value in (2.5, 0.1 + 0.2, 1 / 3, 1e-300, 1.7976931348623157e308):
        assert float(render_attribute(value)) == value


def test_batch_has_every_column_right() -> None:
    when = dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=dt.UTC)
    tick = datetime_to_tick(when)
    events = [
        Event("pe-1", tick, "nodes/a/load", {"load": 2.5, "up": True, "n": 7, "loc": "NY"}, "agent", "a-1",
              b"\x00\xffpayload"),
        Event("pe-1", tick + 1, "nodes/b/load", {}, "agent", "b-1", b""),
    ]
    batch = events_to_batch(events, arrow_schema())
    assert batch.schema.equals(arrow_schema())
    rows = batch.to_pylist()
    assert rows[0] == {
        "channel": "nodes/a/load",
        "pubend": "pe-1",
        "tick": tick,
        "time": when,
        "source_service": "agent",
        "source_instance": "a-1",
        "attributes": [("load", "2.5"), ("up", "true"), ("n", "7"), ("loc", "NY")],
        "payload": b"\x00\xffpayload",
    }
    assert rows[1]["attributes"] == [] and rows[1]["payload"] == b""
    assert rows[1]["time"] == when + dt.timedelta(microseconds=1)
    assert batch.column("time").null_count == 0


def test_batches_are_bounded_and_keep_order() -> None:
    events = [event(t, load=t / 10) for t in range(1, 11)]
    batches = list(events_to_batches(events, arrow_schema(), rows_max=4))
    assert [b.num_rows for b in batches] == [4, 4, 2]
    ticks = [t for b in batches for t in b.column("tick").to_pylist()]
    assert ticks == list(range(1, 11))
    assert list(events_to_batches([], arrow_schema())) == []


def test_batch_follows_a_nullable_user_schema() -> None:
    schema = arrow_schema(nullable_schema())
    batch = events_to_batch([event(5, load=1)], schema)
    assert batch.schema.equals(schema)
    assert batch.schema.field("channel").nullable
