"""The `tidings` data source's planning and task reads against a fake broker client, without a JVM."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark import cloudpickle
from pyspark.sql.types import StructType

from tests.unit.spark_overlay_fake import BulkReads
from tidings.core.channels import pattern_matches
from tidings.core.errors import GapError
from tidings.core.event import Event
from tidings.core.wire.messages import Records
from tidings.spark.arrow import EVENT_SCHEMA, arrow_schema
from tidings.spark.options import parse_read_options
from tidings.spark.planning import DataLossError, ReadError
from tidings.spark.source import (
    TickRangePartition,
    TidingsDataSource,
    TidingsReader,
    read_batches,
    register,
)


def make_event(tick: int) -> Event:
    host = f"h{tick % 4}"
    channel = f"nodes/{host}/load" if tick % 5 else f"nodes/{host}/mem"
    return Event("pe", tick, channel, {"load": tick / 100, "host": host}, "agent", host, str(tick).encode())


@dataclass
class FakeBroker:
    """A pubend log: events by tick, ranges (a, b] released by retention, and a record of reads."""

    events: list[Event]
    released: list[tuple[int, int]] = field(default_factory=list)
    released_through: int | None = None
    reads: list[tuple[str, int, int]] = field(default_factory=list)
    connections: list[str] = field(default_factory=list)
    bogus: list[Event] = field(default_factory=list)  # sent first on every read: a misbehaving broker

    def connect(self, opts: object, address: str, instance: str) -> FakeClient:
        self.connections.append(instance)
        return FakeClient(self)


BROKER: dict[str, FakeBroker] = {}  # the test's broker: the connect function must pickle by reference


def fake_connect(opts: object, address: str, instance: str) -> FakeClient:
    return BROKER["now"].connect(opts, address, instance)


class FakeClient(BulkReads):
    pubend = "pe"

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        return None

    def status(self) -> dict[str, Any]:
        ticks = [e.tick for e in self.broker.events]
        return {
            "pubend": "pe",
            "first_tick": min(ticks) if ticks else None,
            "last_tick": max(ticks) if ticks else 0,
            "released_through": self.broker.released_through,
        }

    def read(self, pattern: str, *, filter: str | None = None, after: int = 0,
             end: int | None = None) -> Iterator[Event]:
        assert end is not None
        self.broker.reads.append((pattern, after, end))
        yield from self.broker.bogus
        holes = sorted(self.broker.released)
        for ev in sorted(self.broker.events, key=lambda e: e.tick):
            for a, b in holes:
                if after < b and a < ev.tick and b >= ev.tick and ev.tick <= end:
                    raise GapError(max(a, after), b)
            if after < ev.tick <= end and pattern_matches(pattern, ev.channel):
                yield ev


def read_ticks(client: FakeClient, opts: Any, after: int, end: int) -> list[int]:
    return [t for batch in read_batches(client, opts, "pe", after, end, arrow_schema())
            for t in batch.column("tick").to_pylist()]


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    BROKER["now"] = FakeBroker([make_event(t) for t in range(1000, 1100)])
    yield BROKER["now"]
    BROKER.clear()


def reader(**options: str) -> TidingsReader:
    opts = parse_read_options({"broker": "127.0.0.1:7400", "pattern": "nodes/+/load", **options})
    return TidingsReader(opts, EVENT_SCHEMA, fake_connect)


def read_all(r: TidingsReader) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for planned in r.partitions():
        shipped = pickle.loads(pickle.dumps(planned))  # as Spark ships it to a task
        for batch in r.read(shipped):
            rows.extend(batch.to_pylist())
    return rows


def expected_ticks(lo: int, hi: int) -> list[int]:
    return [t for t in range(lo, hi + 1) if t % 5]


# --- task reads ------------------------------------------------------------------------------------


def test_read_batches_reads_its_range_only(broker: FakeBroker) -> None:
    opts = parse_read_options({"broker": "h:1", "pattern": "nodes/+/load"})
    got = read_ticks(FakeClient(broker), opts, 1010, 1020)
    assert got == expected_ticks(1011, 1020)


def test_gap_fails_the_read_by_default(broker: FakeBroker) -> None:
    broker.released = [(1030, 1040)]
    opts = parse_read_options({"broker": "h:1", "pattern": "nodes/+/load"})
    with pytest.raises(DataLossError, match=r"after tick 1030 up to tick 1040.*failOnDataLoss"):
        read_ticks(FakeClient(broker), opts, 1020, 1060)


def test_gap_is_skipped_and_logged_without_fail_on_data_loss(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    broker.released = [(1030, 1040), (1050, 1052)]
    opts = parse_read_options({"broker": "h:1", "pattern": "nodes/+/load", "failOnDataLoss": "false"})
    with caplog.at_level(logging.WARNING, logger="tidings.spark"):
        got = read_ticks(FakeClient(broker), opts, 1020, 1060)
    assert got == expected_ticks(1021, 1030) + expected_ticks(1041, 1050) + expected_ticks(1053, 1060)
    assert broker.reads == [("nodes/+/load", 1020, 1060), ("nodes/+/load", 1040, 1060),
                            ("nodes/+/load", 1052, 1060)]
    assert "skipped 2 gap(s), 12 ticks in all: (1030, 1040], (1050, 1052]" in caplog.text


def test_gap_past_the_end_of_the_range_is_counted_inside_it(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    broker.released = [(1055, 1080)]
    opts = parse_read_options({"broker": "h:1", "pattern": "nodes/+/load", "failOnDataLoss": "false"})
    with caplog.at_level(logging.WARNING, logger="tidings.spark"):
        got = read_ticks(FakeClient(broker), opts, 1050, 1060)
    assert got == expected_ticks(1051, 1055)
    assert len(broker.reads) == 1
    assert "skipped 1 gap(s), 5 ticks in all: (1055, 1060]" in caplog.text


def test_out_of_range_event_from_the_broker_fails_the_read(broker: FakeBroker) -> None:
    broker.bogus = [make_event(1001)]
    opts = parse_read_options({"broker": "h:1", "pattern": "nodes/+/load"})
    with pytest.raises(ReadError, match=r"sent RECORDS with ticks 1001\.\.\d+ out of order or outside \(1010, 1020\]"):
        read_ticks(FakeClient(broker), opts, 1010, 1020)


def test_gap_behind_the_read_position_fails_the_read(broker: FakeBroker) -> None:
    class Backwards(FakeClient):
        def read_records(self, pattern: str, *, filter: str | None = None, after: int = 0,
                         end: int, spans: bool = False) -> Iterator[Records]:
            raise GapError(after - 10, after)
            yield  # a generator, as the real client's read

    opts = parse_read_options({"broker": "h:1", "pattern": "#", "failOnDataLoss": "false"})
    with pytest.raises(ReadError, match="behind the read position"):
        read_ticks(Backwards(broker), opts, 1010, 1020)


# --- planning and the whole read -------------------------------------------------------------------


def test_whole_log_in_three_partitions(broker: FakeBroker) -> None:
    r = reader(partitions="3")
    parts = r.partitions()
    assert [(p.index, p.after, p.end) for p in parts] == [(0, 999, 1032), (1, 1032, 1065), (2, 1065, 1099)]
    rows = read_all(r)
    assert [row["tick"] for row in rows] == expected_ticks(1000, 1099)
    assert broker.connections == ["planner", "planner", "read-0", "read-1", "read-2"]
    assert rows[0]["attributes"] == [("load", "10.01"), ("host", "h1")]


def test_tick_range_and_future_end(broker: FakeBroker) -> None:
    rows = read_all(reader(startTick="1010", endTick="999999999", partitions="2"))
    assert [row["tick"] for row in rows] == expected_ticks(1010, 1099)
    rows = read_all(reader(startTick="1010", endTick="1019"))
    assert [row["tick"] for row in rows] == expected_ticks(1010, 1019)


def test_empty_read_makes_one_empty_partition_and_no_task_connection(broker: FakeBroker) -> None:
    r = reader(startTick="5000")
    parts = r.partitions()
    assert len(parts) == 1 and parts[0].end <= parts[0].after
    assert list(r.read(parts[0])) == []
    assert broker.connections == ["planner"]


def test_released_start_fails_at_planning(broker: FakeBroker) -> None:
    broker.released_through = 999
    with pytest.raises(DataLossError, match="after tick 899 up to tick 999"):
        reader(startTick="900").partitions()


def test_released_start_is_skipped_at_planning_when_allowed(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    broker.released_through = 999
    with caplog.at_level(logging.WARNING, logger="tidings.spark"):
        rows = read_all(reader(startTick="900", failOnDataLoss="false"))
    assert [row["tick"] for row in rows] == expected_ticks(1000, 1099)
    assert "skipping ticks (899, 999] of pubend pe, 100 ticks" in caplog.text


def test_reader_and_partitions_survive_pickling() -> None:
    r = reader(partitions="2", filter="load > 2")
    clone = cloudpickle.loads(cloudpickle.dumps(r))
    assert clone.opts == r.opts and clone.schema == r.schema
    part = pickle.loads(pickle.dumps(TickRangePartition(3, "pe", "a:1", 10, 20)))
    assert (part.index, part.address, part.after, part.end, part.value) == (3, "a:1", 10, 20, ("pe", 10, 20))


# --- the DataSource class --------------------------------------------------------------------------


def test_data_source_checks_options_when_spark_asks_for_the_schema() -> None:
    assert TidingsDataSource.name() == "tidings"
    ds = TidingsDataSource({"broker": "h:1", "pattern": "a/#"})
    assert ds.schema() == EVENT_SCHEMA
    with pytest.raises(ValueError, match='"pattern" is required'):
        TidingsDataSource({"broker": "h:1"}).schema()
    with pytest.raises(ValueError, match="a read's schema takes some of the columns"):
        ds.reader(StructType([EVENT_SCHEMA["tick"], EVENT_SCHEMA["tick"]]))
    assert isinstance(ds.reader(EVENT_SCHEMA), TidingsReader)
    assert ds.reader(EVENT_SCHEMA[:3]).schema == EVENT_SCHEMA[:3]  # some columns: those only


def test_register_carries_the_default_partitions_by_value() -> None:
    class FakeSpark:
        class sparkContext:  # the attribute names of a SparkSession
            defaultParallelism = 5

        class dataSource:
            registered: list[type] = []

            @classmethod
            def register(cls, ds: type) -> None:
                cls.registered.append(ds)

    bound = register(FakeSpark())
    assert FakeSpark.dataSource.registered == [bound]
    assert issubclass(bound, TidingsDataSource) and bound.name() == "tidings"
    clone = cloudpickle.loads(cloudpickle.dumps(bound))
    assert clone.default_partitions == 5
    assert clone({"broker": "h:1", "pattern": "a/#"}).read_options().partitions == 5
    assert register(FakeSpark(), default_partitions=7).default_partitions == 7
    with pytest.raises(ValueError, match="at least 1"):
        register(FakeSpark(), default_partitions=0)
