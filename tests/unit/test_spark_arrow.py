"""The fixed schema of the `tidings` data source and the decoding of a bulk read's records into Arrow,
without a JVM; every test runs with the compiled decoder (when built) and with the Python one alone."""

from __future__ import annotations

import datetime as dt
import importlib.util
import shutil
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType  # noqa: E402

from tidings.core.channels import pattern_matches  # noqa: E402
from tidings.core.event import INT_MAX, INT_MIN, Event, datetime_to_tick  # noqa: E402
from tidings.spark import arrow  # noqa: E402
from tidings.spark.arrow import (  # noqa: E402
    EVENT_SCHEMA,
    RecordsError,
    arrow_schema,
    check_schema,
    records_to_batch,
    render_attribute,
    span_to_batch,
)
from tidings.storage import record  # noqa: E402

SIMPLE = (
    "struct<channel:string,pubend:string,tick:bigint,time:timestamp,source_service:string,"
    "source_instance:string,source_authenticated:boolean,attributes:map<string,string>,payload:binary>"
)


@pytest.fixture(scope="module", autouse=True, params=["compiled", "python"])
def decoder(request: pytest.FixtureRequest) -> Any:
    """The module's tests once through the compiled fast path (arrow._compiled, which leaves what is
    unusual to the Python decoder) and once through the Python decoder alone."""
    built = arrow._columns
    if request.param == "compiled" and built is None:
        pytest.skip("the compiled decoder is not built here (setup.py: no C compiler or zlib headers)")
    arrow._columns = built if request.param == "compiled" else None
    yield request.param
    arrow._columns = built


def test_the_compiled_decoder_is_built_where_it_can_be() -> None:
    """setup.py builds it where a C compiler and zlib's headers are found; a build that broke there
    must not pass unseen as a slower read."""
    buildable = shutil.which("cc") is not None and Path("/usr/include/zlib.h").exists()
    built = importlib.util.find_spec("tidings.spark._columns") is not None
    assert built or not buildable, "the compiled decoder (setup.py) failed to build: see pip install's output"


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
        service="agent", instance=f"i{tick}", payload=bytes([tick % 256]) * (tick % 4), authenticated=tick % 5 == 0,
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


def some_columns() -> StructType:
    """A user's schema of two of the columns, in another order (`attributes map<string,string>, channel string`)."""
    return StructType([StructField("attributes", MapType(StringType(), StringType())),
                       StructField("channel", StringType())])


def test_check_schema_accepts_the_event_columns_or_some_of_them_with_their_types() -> None:
    check_schema(EVENT_SCHEMA)
    check_schema(nullable_schema())  # nullable columns, same names and types: fine
    check_schema(StructType([StructField("tick", LongType())]))  # some of them, in any order
    check_schema(some_columns())
    with pytest.raises(ValueError, match=r"\(no column\)"):
        check_schema(StructType.fromJson({"type": "struct", "fields": []}))
    with pytest.raises(ValueError, match=r"tick not as in the event schema"):
        check_schema(StructType([StructField("channel", StringType()), StructField("tick", StringType())]))
    with pytest.raises(ValueError, match=r"host not as in the event schema"):
        check_schema(StructType([StructField("host", StringType())]))
    with pytest.raises(ValueError, match="named twice"):
        check_schema(StructType([StructField("tick", LongType()), StructField("tick", LongType())]))


def test_a_batch_of_some_columns_holds_those_columns_in_the_schemas_order() -> None:
    records = [["p-1", 10, "nodes/a/load", {"load": 1.5}, "svc", "i1", b"x" * 100],
               ["p-1", 12, "nodes/b/load", {"load": 2}, "svc", "i2", b"y"]]
    full, _ = records_to_batch(msgpack.packb(records), 2, arrow_schema(), "p-1", 0, 20)
    some = some_columns()
    batch, last = records_to_batch(msgpack.packb(records), 2, arrow_schema(some), "p-1", 0, 20)
    assert last == 12 and batch.schema.names == ["attributes", "channel"]
    assert batch.column(0).to_pylist() == full.column("attributes").to_pylist() == [[("load", "1.5")], [("load", "2")]]
    assert batch.column(1).to_pylist() == full.column("channel").to_pylist()


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


def records(events: list[Event]) -> tuple[bytes, int]:
    """A RECORDS blob of `events` as the broker sends it (a msgpack array of their records as
    logged), and its count."""
    return msgpack.packb([[e.pubend, e.tick, e.channel, e.attributes, e.service, e.instance, e.payload,
                           *([True] if e.authenticated else [])]  # as the broker stamps it (core/publish/intake.py)
                          for e in events]), len(events)


def decode(events: list[Event], schema: pa.Schema | None = None, after: int = 0, end: int = 2**62,
           pubend: str = "pe-1") -> pa.RecordBatch:
    blob, count = records(events)
    batch, last = records_to_batch(blob, count, schema or arrow_schema(), pubend, after, end)
    assert last == events[-1].tick
    return batch


def reference_columns(events: list[Event]) -> dict[str, list[object]]:
    """The columns of `events` built the plain way, one Event at a time (the read before the bulk
    read): what the decoder must equal."""
    return {
        "channel": [e.channel for e in events],
        "pubend": [e.pubend for e in events],
        "tick": [e.tick for e in events],
        "time": [e.time for e in events],
        "source_service": [e.service for e in events],
        "source_instance": [e.instance for e in events],
        "source_authenticated": [e.authenticated for e in events],
        "attributes": [[(k, render_attribute(v)) for k, v in e.attributes.items()] for e in events],
        "payload": [e.payload for e in events],
    }


def test_batch_has_every_column_right() -> None:
    when = dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=dt.UTC)
    tick = datetime_to_tick(when)
    events = [
        Event("pe-1", tick, "nodes/a/load", {"load": 2.5, "up": True, "n": 7, "loc": "NY"}, "agent", "a-1",
              b"\x00\xffpayload", authenticated=True),
        Event("pe-1", tick + 1, "nodes/b/load", {}, "agent", "b-1", b""),
    ]
    batch = decode(events)
    assert batch.schema.equals(arrow_schema())
    rows = batch.to_pylist()
    assert rows[0] == {
        "channel": "nodes/a/load",
        "pubend": "pe-1",
        "tick": tick,
        "time": when,
        "source_service": "agent",
        "source_instance": "a-1",
        "source_authenticated": True,
        "attributes": [("load", "2.5"), ("up", "true"), ("n", "7"), ("loc", "NY")],
        "payload": b"\x00\xffpayload",
    }
    assert rows[1]["attributes"] == [] and rows[1]["payload"] == b"" and rows[1]["source_authenticated"] is False
    assert rows[1]["time"] == when + dt.timedelta(microseconds=1)
    assert batch.column("time").null_count == 0


def test_batch_follows_a_nullable_user_schema() -> None:
    schema = arrow_schema(nullable_schema())
    batch = decode([event(5, load=1)], schema)
    assert batch.schema.equals(schema)
    assert batch.schema.field("channel").nullable


attribute_values = st.one_of(
    st.text(max_size=8), st.booleans(), st.integers(min_value=INT_MIN, max_value=INT_MAX),
    st.floats(allow_nan=False, allow_infinity=False),
)
texts = st.text(max_size=12)  # unicode: channels, sources and attribute names of any script


@st.composite
def event_lists(draw: st.DrawFn) -> list[Event]:
    ticks = sorted(draw(st.sets(st.integers(min_value=1, max_value=2**56), min_size=1, max_size=30)))
    return [Event("pe-1", tick, draw(texts), draw(st.dictionaries(texts, attribute_values, max_size=4)),
                  draw(texts), draw(texts), draw(st.binary(max_size=16))) for tick in ticks]


@settings(max_examples=100, deadline=None)
@given(event_lists())
def test_records_decode_to_the_columns_of_their_events(events: list[Event]) -> None:
    assert decode(events).to_pydict() == reference_columns(events)


@pytest.mark.parametrize(
    ("mangle", "problem"),
    [
        (lambda rows: b"\xc1garbage", "not msgpack"),
        (lambda rows: msgpack.packb(rows[:1]), "said 2 records and held 1"),
        (lambda rows: msgpack.packb([rows[0], rows[1][:6]]), "not 7-element arrays"),
        (lambda rows: msgpack.packb([rows[0], [*rows[1][:1], "7", *rows[1][2:]]]), "tick that is not int"),
        (lambda rows: msgpack.packb([rows[0], [*rows[1][:3], [], *rows[1][4:]]]), "attributes that is not dict"),
        (lambda rows: msgpack.packb([rows[0], [*rows[1][:6], "text"]]), "payload that is not bytes"),
        (lambda rows: msgpack.packb([rows[0], ["pe-2", *rows[1][1:]]]), "another pubend than pe-1"),
        (lambda rows: msgpack.packb([rows[1], rows[0]]), "out of order or outside"),
        (lambda rows: msgpack.packb([rows[0], [*rows[1][:3], {"a": 1, 2: 3}, *rows[1][4:]]]), "not msgpack"),
        (lambda rows: msgpack.packb([rows[0], [*rows[1][:3], {b"a": 1}, *rows[1][4:]]]), "not a string"),
        (lambda rows: msgpack.packb([rows[0], [rows[1][0], 2**64 - 1, *rows[1][2:]]]), "out of order or outside"),
    ],
)
def test_malformed_records_are_refused_with_a_reason(mangle: Any, problem: str) -> None:
    events = [event(5, load=1), event(6)]
    rows = msgpack.unpackb(records(events)[0])
    with pytest.raises(RecordsError, match=problem):
        records_to_batch(mangle(rows), 2, arrow_schema(), "pe-1", 0, 2**62)


def test_records_outside_the_range_are_refused() -> None:
    blob, count = records([event(5), event(6)])
    for after, end in ((5, 10), (0, 5)):
        with pytest.raises(RecordsError, match="outside"):
            records_to_batch(blob, count, arrow_schema(), "pe-1", after, end)


def span(events: list[Event]) -> bytes:
    """`events` as a SPAN carries them: their records as the log holds them, headers and all."""
    bodies = [msgpack.packb([e.pubend, e.tick, e.channel, e.attributes, e.service, e.instance, e.payload])
              for e in events]
    return record.encode([(e.tick, b) for e, b in zip(events, bodies, strict=True)], 0, 0, 1 << 62, 1 << 16)[0]


@st.composite
def spans_and_reads(draw: st.DrawFn) -> tuple[list[Event], str, int, int]:
    """Events of a few channels, a pattern, and the (after, through] a reader keeps of them."""
    ticks = sorted(draw(st.sets(st.integers(min_value=1, max_value=200), min_size=1, max_size=40)))
    channels = st.sampled_from(["nodes/a/load", "nodes/b/load", "nodes/a/cpu", "query/x"])
    events = [Event("pe-1", tick, draw(channels), {"load": draw(st.floats(allow_nan=False, allow_infinity=False))},
                    "agent", draw(st.sampled_from(["a-1", "a-2"])), draw(st.binary(max_size=8))) for tick in ticks]
    after = draw(st.integers(min_value=0, max_value=200))
    return events, draw(st.sampled_from(["#", "nodes/+/load", "nodes/a/#", "query/#", "none/#"])), after, \
        draw(st.integers(min_value=after, max_value=210))


@settings(max_examples=200, deadline=None)
@given(spans_and_reads())
def test_a_span_gives_the_rows_of_its_range_that_match_the_pattern(case: tuple[list[Event], str, int, int]) -> None:
    events, pattern, after, through = case
    wanted = [e for e in events if after < e.tick <= through and pattern_matches(pattern, e.channel)]
    batch = span_to_batch(span(events), arrow_schema(), "pe-1", pattern, after, through)
    if not wanted:
        assert batch is None
    else:
        assert batch is not None and batch.to_pydict() == reference_columns(wanted)


def test_a_span_that_is_not_valid_records_fails_the_read_with_the_reason() -> None:
    good = span([event(5, load=1), event(6)])
    damaged = bytearray(good)
    damaged[-1] ^= 1
    for blob, problem in ((bytes(damaged), "tick 6 fails its checksum"), (good[:-3], "runs past its end"),
                          (good + good, "has tick 5, after 6")):
        with pytest.raises(RecordsError, match=f"a SPAN that is not whole valid records: .*{problem}"):
            span_to_batch(blob, arrow_schema(), "pe-1", "#", 0, 100)
    other = span([Event("pe-2", 5, "nodes/a/load", {}, "agent", "a-1", b"")])
    with pytest.raises(RecordsError, match="another pubend than pe-1"):
        span_to_batch(other, arrow_schema(), "pe-1", "#", 0, 100)


@pytest.mark.parametrize("flags", [[[], []], [[True], [True]], [[], [True]], [[False], []], [[True], [False]]])
def test_the_authenticated_column_reads_old_and_new_records(flags: list[list[bool]]) -> None:
    """A record without the flag (logged before it existed, or from an anonymous source) reads as
    false, beside records with it; only the column is built when the schema asks for it alone."""
    bodies = [["pe-1", tick, "c", {}, "s", "i", b"", *flag] for tick, flag in zip((1, 2), flags, strict=True)]
    expected = [bool(flag and flag[0]) for flag in flags]
    for schema in (arrow_schema(), arrow_schema(StructType([EVENT_SCHEMA["source_authenticated"]]))):
        batch, _ = records_to_batch(msgpack.packb(bodies), 2, schema, "pe-1", 0, 9)
        assert batch.column("source_authenticated").to_pylist() == expected
        span = record.encode([(b[1], msgpack.packb(b)) for b in bodies], 0, 0, 1 << 62, 1 << 16)[0]
        assert span_to_batch(span, schema, "pe-1", "#", 0, 9).column("source_authenticated").to_pylist() == expected


@pytest.mark.parametrize("flag", [1, None, "true", b"\x01"])
def test_an_authenticated_flag_that_is_not_bool_is_refused(flag: object) -> None:
    blob = msgpack.packb([["pe-1", 1, "c", {}, "s", "i", b"", flag]])
    with pytest.raises(RecordsError, match="authenticated flag that is not bool"):
        records_to_batch(blob, 1, arrow_schema(), "pe-1", 0, 9)
