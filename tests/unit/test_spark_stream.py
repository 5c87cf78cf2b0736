"""The streaming source's offsets, micro-batch planning and reader against a fake overlay, without a JVM."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tests.unit.spark_overlay_fake import BulkReads, FakeBroker
from tidings.core.channels import pattern_matches
from tidings.core.checkpoint import Checkpoint
from tidings.core.errors import GapError
from tidings.core.event import Event
from tidings.spark.arrow import EVENT_SCHEMA
from tidings.spark.micro_batch import Head, admit, find_losses, latest, plan_ranges, skip
from tidings.spark.offsets import Offset, OffsetError
from tidings.spark.options import check_options, parse_stream_options
from tidings.spark.reading import TickRangePartition
from tidings.spark.stream import StreamDataLossError, TidingsStreamReader

# ---- offsets -------------------------------------------------------------------------------------

pubends = st.text("0123456789abcdef", min_size=1, max_size=6)
ticks = st.integers(0, 2**63 - 1)
offsets = st.builds(Offset.make, ticks, st.dictionaries(pubends, ticks, max_size=6),
                    st.integers(0, 10**6), st.integers(0, 10**12))


@given(offsets)
def test_an_offset_is_canonical_json_and_reads_back(offset: Offset) -> None:
    text = json.dumps(offset.to_json())  # what Spark's runner does: no sort_keys
    assert text == json.dumps(json.loads(text), sort_keys=True)
    back = Offset.from_json(json.loads(text))
    assert back == offset and json.dumps(back.to_json()) == text
    assert all(t > offset.default for t in offset.positions.values())
    assert Offset.from_checkpoint(Checkpoint.decode(offset.token())).positions == offset.positions


@pytest.mark.parametrize("bad", [
    None, [], {"default": 1}, {"default": -1, "lost": {"ranges": 0, "ticks": 0}, "positions": {}},
    {"default": 1, "lost": {"ranges": 0}, "positions": {}},
    {"default": 1, "lost": {"ranges": 0, "ticks": 0}, "positions": {"": 3}},
    {"default": 1, "lost": {"ranges": 0, "ticks": 0}, "positions": {"p": "3"}},
    {"default": True, "lost": {"ranges": 0, "ticks": 0}, "positions": {}},
])
def test_an_offset_not_written_by_the_source_is_refused(bad: Any) -> None:
    with pytest.raises(OffsetError, match="tidings offset"):
        Offset.from_json(bad)


def test_positions_at_or_below_the_default_mean_nothing_and_are_dropped() -> None:
    assert Offset.make(10, {"b": 10, "a": 5, "c": 11}) == Offset.make(10, {"c": 11})
    assert Offset.make(10, {"c": 11}).moved({"c": 9, "d": 12}).positions == {"c": 11, "d": 12}


# ---- micro-batch planning --------------------------------------------------------------------------

logs = st.dictionaries(pubends, st.lists(st.integers(1, 400), max_size=30, unique=True).map(sorted),
                       min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(logs, st.integers(0, 200), st.integers(1, 25), st.data())
def test_admission_takes_at_most_the_limit_and_always_progresses(
    events: dict[str, list[int]], default: int, events_max: int, data: st.DataObject,
) -> None:
    start = Offset.make(default, {p: data.draw(st.integers(default, 300)) for p in events})
    tails = {p: max([start.position(p), *ts]) for p, ts in events.items()}
    end = start.moved(tails)
    window = {p: [t for t in ts if start.position(p) < t <= end.position(p)] for p, ts in events.items()}
    fetched = {p: ts[:events_max] for p, ts in window.items()}
    complete = {p: len(ts) < events_max for p, ts in window.items()}
    got = admit(start, end, fetched, complete, events_max)
    assert end.covers(got) and got.covers(start)
    taken = sum(1 for p, ts in window.items() for t in ts if start.position(p) < t <= got.position(p))
    available = sum(map(len, window.values()))
    assert taken == min(events_max, available) or (taken >= 1 and taken <= events_max)
    if available <= events_max:
        assert got == end  # nothing held back
    if available:
        assert taken >= 1


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(pubends, st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=5),
       st.integers(1, 9))
def test_partitions_tile_each_pubends_ticks_once(moves: dict[str, tuple[int, int]], partitions: int) -> None:
    start = Offset.make(0, {p: a for p, (a, _) in moves.items()})
    end = start.moved({p: a + w for p, (a, w) in moves.items()})
    marks = {p: tuple(range(a + 1, a + w, max(1, w // 10))) for p, (a, w) in moves.items() if a % 2}
    ranges = plan_ranges(start, end, {p: f"h{p}:1" for p in moves}, partitions, None, marks)
    for pubend in moves:
        mine = [(r.after, r.end) for r in ranges if r.pubend == pubend]
        assert all(r.address == f"h{pubend}:1" for r in ranges if r.pubend == pubend)
        if end.position(pubend) > start.position(pubend):
            assert mine[0][0] == start.position(pubend) and mine[-1][1] == end.position(pubend)
            assert all(mine[i][1] == mine[i + 1][0] for i in range(len(mine) - 1))
            assert all(a < b for a, b in mine)
        else:
            assert not mine
    assert len(ranges) <= max(partitions, len(moves))


def test_a_backlog_is_shared_out_at_the_tick_marks() -> None:
    start = Offset.make(0, {"p": 100})
    end = start.moved({"p": 10_000})  # the events in 101..200, the clock's ticks after them
    ranges = plan_ranges(start, end, {"p": "a:1"}, 2, None, {"p": (121, 141, 161, 181)})
    assert [(r.after, r.end) for r in ranges] == [(100, 140), (140, 10_000)]  # 2 and 3 of 5 runs


def test_a_partition_of_a_pubend_nobody_reports_is_a_clear_error() -> None:
    start = Offset.make(0)
    with pytest.raises(Exception, match="no broker of the overlay reports pubend p2"):
        plan_ranges(start, start.moved({"p2": 5}), {"p1": "a:1"}, 2)
    with pytest.raises(OffsetError, match="ends before it starts"):
        plan_ranges(start.moved({"p": 5}), start, {}, 2)


def test_losses_are_found_above_the_start_and_counted_when_skipped() -> None:
    start = Offset.make(100, {"b": 150})
    heads = {"a": Head("a:1", 300, 120), "b": Head("b:1", 300, 140), "c": Head("c:1", 300, 0)}
    losses = find_losses(start, heads)
    assert [(x.pubend, x.after, x.through) for x in losses] == [("a", 100, 120)]
    moved = skip(start, losses)
    assert (moved.position("a"), moved.lost_ranges, moved.lost_ticks) == (120, 1, 20)
    assert latest(moved, heads, cap={"a": 200}).positions == {"a": 200, "b": 150}


# ---- the reader, against a fake overlay ------------------------------------------------------------

@dataclass
class FakeOverlay:
    brokers: dict[str, FakeBroker]
    down: set[str] = field(default_factory=set)
    registrations: dict[str, Checkpoint] = field(default_factory=dict)
    reads: list[tuple[str, int, int]] = field(default_factory=list)


OVERLAY: dict[str, FakeOverlay] = {}  # by test: the connect function must pickle by reference


def fake_connect(opts: Any, address: str, instance: str) -> FakeClient:
    if address in OVERLAY["now"].down:
        raise ConnectionRefusedError(f"{address} is down")
    return FakeClient(OVERLAY["now"].brokers[address], OVERLAY["now"])


class FakeSub:
    def __init__(self, overlay: FakeOverlay, name: str) -> None:
        self.overlay, self.name = overlay, name

    @property
    def token(self) -> str:
        return self.overlay.registrations[self.name].encode()

    def ack(self, token: str) -> None:
        self.overlay.registrations[self.name].release(Checkpoint.decode(token))

    def close(self) -> None:
        return None


class FakeClient(BulkReads):
    def __init__(self, broker: FakeBroker, overlay: FakeOverlay) -> None:
        self.broker, self.overlay, self.pubend = broker, overlay, broker.pubend

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def status(self) -> dict[str, Any]:
        b = self.broker
        return {"pubend": b.pubend, "last_tick": max((e.tick for e in b.events), default=0),
                "released_through": b.released_through,
                "overlay": {"address": b.address, "leaf_set": [["id", a] for a in b.leaf_set]}}

    def subscribe(self, pattern: str, *, filter: str | None, start: int, durable: str) -> FakeSub:
        self.overlay.registrations.setdefault(durable, Checkpoint(start, {self.pubend: start}))
        return FakeSub(self.overlay, durable)


    def read(self, pattern: str, *, filter: str | None = None, after: int = 0, end: int | None = None,
             on_gap: str = "raise") -> Iterator[Event]:
        assert end is not None
        self.overlay.reads.append((self.pubend, after, end))
        if self.broker.released_through > after:
            raise GapError(after, self.broker.released_through, self.pubend)
        yield from (e for e in self.broker.events if after < e.tick <= end and pattern_matches(pattern, e.channel))


@pytest.fixture
def overlay() -> Iterator[FakeOverlay]:
    # a ring of three brokers; the one the query names knows only its right-hand neighbour
    brokers = {
        "b1:1": FakeBroker("p1", "b1:1", ["b2:1"]),
        "b2:1": FakeBroker("p2", "b2:1", ["b3:1", "b1:1"]),
        "b3:1": FakeBroker("p3", "b3:1", ["b1:1"]),
    }
    OVERLAY["now"] = FakeOverlay(brokers)
    yield OVERLAY["now"]
    OVERLAY.clear()


def reader(**options: str) -> TidingsStreamReader:
    opts = parse_stream_options({"broker": "b1:1", "pattern": "load/#", "durableName": "q", **options}, 4)
    return TidingsStreamReader(opts, EVENT_SCHEMA, fake_connect)


def read_batch(r: TidingsStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[str, int]]:
    rows = []
    for part in r.partitions(start, end):
        assert isinstance(part, TickRangePartition)
        for batch in r.read(cloudpickle.loads(cloudpickle.dumps(part))):
            rows += zip(batch.column("pubend").to_pylist(), batch.column("tick").to_pylist(), strict=True)
    return rows


def run(r: TidingsStreamReader, start: dict[str, Any], limit: Any, batches_max: int = 100) -> tuple[
        list[tuple[str, int]], dict[str, Any], int]:
    """Micro-batches until the source has nothing new: rows, the last offset, batches run."""
    rows: list[tuple[str, int]] = []
    for count in range(batches_max):
        end = r.latestOffset(start, limit)
        if json.dumps(end) == json.dumps(start):
            return rows, start, count
        rows += read_batch(r, start, end)
        r.commit(end)
        start = end
    raise AssertionError("the source never ran dry")


def test_latest_is_pinned_across_calls_and_driver_restarts(overlay: FakeOverlay) -> None:
    b1, b2 = overlay.brokers["b1:1"], overlay.brokers["b2:1"]
    old = [b1.publish(100), b2.publish(90)]
    first = reader().initialOffset()
    assert Offset.from_json(first).position("p1") == 100 and Offset.from_json(first).position("p2") == 90
    new = [b1.publish(110), b2.publish(95), overlay.brokers["b3:1"].publish(120)]
    again = reader()  # a restarted driver: a new reader, the same durable subscription
    assert json.dumps(again.initialOffset()) == json.dumps(first)
    rows, _, _ = run(again, first, ReadAllAvailable())
    assert sorted(rows) == sorted((e.pubend, e.tick) for e in new)
    assert not {(e.pubend, e.tick) for e in old} & set(rows)


def test_earliest_token_and_time_starts(overlay: FakeOverlay) -> None:
    b1 = overlay.brokers["b1:1"]
    for tick in (10, 20, 30):
        b1.publish(tick)
    b1.released_through = 15
    assert Offset.from_json(reader(durableName="e", startingOffsets="earliest").initialOffset()).position("p1") == 15
    token = Offset.make(0, {"p1": 20}).token()
    assert Offset.from_json(reader(durableName="t", startingOffsets=token).initialOffset()).position("p1") == 20
    at = reader(durableName="w", startingOffsets="1970-01-01T00:00:00.000025Z").initialOffset()
    assert Offset.from_json(at) == Offset.make(24)


def test_commit_releases_only_forward_and_is_idempotent(overlay: FakeOverlay) -> None:
    r = reader()
    start = r.initialOffset()
    for tick in (100, 200):
        overlay.brokers["b2:1"].publish(tick)
    end = r.latestOffset(start, ReadAllAvailable())
    r.commit(end)
    r.commit(end)
    r.commit(start)  # an older offset: nothing moves back
    assert overlay.registrations["q"].position("p2") == 200
    assert Offset.from_json(reader().initialOffset()).position("p2") == 200  # what a new query would resume


def test_admission_bounds_each_batch_and_the_query_reads_everything_once(overlay: FakeOverlay) -> None:
    r = reader(maxEventsPerTrigger="7")
    start = r.initialOffset()
    published = [overlay.brokers[a].publish(t) for t in range(1, 30) for a in ("b1:1", "b2:1", "b3:1") if t % 3]
    assert r.getDefaultReadLimit() == ReadMaxRows(7)
    sizes = []
    while True:
        end = r.latestOffset(start, ReadMaxRows(7))
        if end == start:
            break
        sizes.append(len(read_batch(r, start, end)))
        start = end
    assert max(sizes) <= 7 and sum(sizes) == len(published)
    assert len(sizes) <= len(published) // 7 + 4


def test_available_now_stops_at_the_tails_it_saw(overlay: FakeOverlay) -> None:
    r = reader()
    start = r.initialOffset()
    first = [overlay.brokers["b3:1"].publish(t) for t in (5, 6)]
    r.prepareForTriggerAvailableNow()
    overlay.brokers["b3:1"].publish(7)
    overlay.brokers["b1:1"].publish(8)  # b1 had no tail then: capped at where the query stood
    rows, _, batches = run(r, start, ReadAllAvailable())
    assert rows == [(e.pubend, e.tick) for e in first] and batches == 1


def test_released_ticks_fail_the_query_or_are_skipped_and_counted(overlay: FakeOverlay) -> None:
    b2 = overlay.brokers["b2:1"]
    r = reader()
    start = r.initialOffset()
    for tick in (10, 20, 30, 40):
        b2.publish(tick)
    b2.released_through = 25
    with pytest.raises(StreamDataLossError, match=r"pubend p2: ticks \(0, 25\].*failOnDataLoss"):
        r.latestOffset(start, ReadAllAvailable())
    skipping = reader(failOnDataLoss="false")
    rows, end, _ = run(skipping, start, ReadAllAvailable())
    assert rows == [("p2", 30), ("p2", 40)]
    assert end["lost"] == {"ranges": 1, "ticks": 25}
    assert all(after >= 25 for pubend, after, _ in overlay.reads if pubend == "p2")  # the gap is not re-read


def test_the_reader_pickles_after_planning(overlay: FakeOverlay) -> None:
    r = reader()
    start = r.initialOffset()
    overlay.brokers["b1:1"].publish(5)
    end = r.latestOffset(start, ReadAllAvailable())
    clone = cloudpickle.loads(cloudpickle.dumps(r))
    parts = clone.partitions(start, end)
    assert sum(b.num_rows for part in parts for b in clone.read(part)) == 1


def test_a_broker_that_is_down_holds_its_pubend_back_and_a_commit_waits_for_the_next(
    overlay: FakeOverlay, caplog: pytest.LogCaptureFixture,
) -> None:
    r = reader()
    start = r.initialOffset()
    overlay.brokers["b2:1"].publish(5)
    overlay.brokers["b3:1"].publish(6)
    overlay.down.add("b2:1")
    overlay.brokers["b1:1"].leaf_set.append("b3:1")  # its neighbour on the other side of the ring
    end = r.latestOffset(start, ReadAllAvailable())
    assert Offset.from_json(end).positions == {"p3": 6}
    assert "b2:1 of the overlay is not reachable" in caplog.text
    overlay.down = {"b1:1"}
    r.commit(end)  # the registration's broker is down: logged, not raised
    assert "could not acknowledge" in caplog.text
    with pytest.raises(ConnectionRefusedError):
        r.latestOffset(end, ReadAllAvailable())  # planning starts at the named broker


def test_a_task_refuses_a_broker_that_logs_another_pubend(overlay: FakeOverlay) -> None:
    r = reader()
    with pytest.raises(Exception, match="now logs pubend p1, not p9"):
        list(r.read(TickRangePartition(0, "p9", "b1:1", 0, 10)))


def test_stream_options() -> None:
    with pytest.raises(ValueError, match='"durableName" is required'):
        parse_stream_options({"broker": "a:1", "pattern": "#"})
    with pytest.raises(ValueError, match=r'"startTick" is an option of spark\.read'):
        parse_stream_options({"broker": "a:1", "pattern": "#", "durableName": "q", "startTick": "1"})
    with pytest.raises(ValueError, match='"maxEventsPerTrigger" must be between 1'):
        parse_stream_options({"broker": "a:1", "pattern": "#", "durableName": "q", "maxEventsPerTrigger": "0"})
    with pytest.raises(ValueError, match='"startingOffsets" must be "latest", "earliest"'):
        parse_stream_options({"broker": "a:1", "pattern": "#", "durableName": "q", "startingOffsets": "soon"})
    with pytest.raises(ValueError, match="not a valid checkpoint token"):
        parse_stream_options({"broker": "a:1", "pattern": "#", "durableName": "q", "startingOffsets": "tk1.xx"})
    with pytest.raises(ValueError, match=r"startTick are for spark\.read and durableName for spark\.readStream"):
        check_options({"broker": "a:1", "pattern": "#", "durableName": "q", "startTick": "1"})
    with pytest.raises(ValueError, match='"durableName" is required'):
        check_options({"broker": "a:1", "pattern": "#", "maxEventsPerTrigger": "5"})
    check_options({"broker": "a:1", "pattern": "#", "startTick": "5"})
    opts = parse_stream_options({"BROKER": "a:1", "pattern": "#", "durablename": "q"})
    assert (opts.starting, opts.events_per_trigger_max, opts.fail_on_data_loss) == ("latest", None, True)
