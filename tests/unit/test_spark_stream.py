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
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import ConnectionClosed, GapError
from tidings.core.event import Event
from tidings.spark.arrow import EVENT_SCHEMA
from tidings.spark.failover import ENTRY_DEMOTED_NS, NoBrokerError
from tidings.spark.micro_batch import Head, admit, find_losses, latest, plan_ranges, skip
from tidings.spark.offsets import Offset, OffsetError
from tidings.spark.options import check_options, parse_read_options, parse_stream_options
from tidings.spark.planning import ReadError
from tidings.spark.reading import TickRangePartition
from tidings.spark.stream import READ_RETRY_BACKOFF_S, PubendOutageError, StreamDataLossError, TidingsStreamReader

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
    registrations: dict[tuple[str, str], Checkpoint] = field(default_factory=dict)  # (broker, name)
    reads: list[tuple[str, int, int]] = field(default_factory=list)
    clock: int = 0  # the tick the brokers' durable tails follow while nothing is published
    break_reads_after: int | None = None  # a broker lost after sending this many frames of a read


OVERLAY: dict[str, FakeOverlay] = {}  # by test: the connect function must pickle by reference


def fake_connect(opts: Any, address: str, instance: str) -> FakeClient:
    if address in OVERLAY["now"].down or address not in OVERLAY["now"].brokers:
        raise ConnectionRefusedError(f"{address} is down")
    return FakeClient(OVERLAY["now"].brokers[address], OVERLAY["now"])


class FakeSub:
    def __init__(self, overlay: FakeOverlay, key: tuple[str, str]) -> None:
        self.overlay, self.key = overlay, key

    @property
    def token(self) -> str:
        return self.overlay.registrations[self.key].encode()

    def ack(self, token: str) -> None:
        self.overlay.registrations[self.key].release(Checkpoint.decode(token))

    def close(self, forget: bool = False) -> None:
        if forget:
            del self.overlay.registrations[self.key]


class FakeClient(BulkReads):
    def __init__(self, broker: FakeBroker, overlay: FakeOverlay) -> None:
        self.broker, self.overlay, self.pubend = broker, overlay, broker.pubend

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def status(self) -> dict[str, Any]:
        b = self.broker
        newest = max((e.tick for e in b.events), default=0)
        return {"pubend": b.pubend, "last_tick": max(newest, self.overlay.clock), "last_event_tick": newest,
                "released_through": b.released_through,
                "overlay": {"address": b.address, "leaf_set": [["id", a] for a in b.leaf_set]}}

    def subscribe(self, pattern: str, *, filter: str | None, start: int, durable: str) -> FakeSub:
        self.overlay.registrations.setdefault((self.broker.address, durable), Checkpoint(start, {self.pubend: start}))
        return FakeSub(self.overlay, (self.broker.address, durable))

    def read_records(self, pattern: str, *, filter: str | None = None, after: int = 0,
                     end: int, spans: bool = False) -> Iterator[Any]:
        for count, frame in enumerate(super().read_records(pattern, filter=filter, after=after, end=end)):
            if self.overlay.break_reads_after is not None and count >= self.overlay.break_reads_after:
                self.overlay.break_reads_after = None  # once
                raise ConnectionClosed("the broker went away")
            yield frame


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


def reader(clock: Any = None, **options: str) -> TidingsStreamReader:
    opts = parse_stream_options({"broker": "b1:1", "pattern": "load/#", "durableName": "q", **options}, 4)
    return TidingsStreamReader(opts, EVENT_SCHEMA, fake_connect, clock=clock or Clock(), sleep=lambda s: None)


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
    assert overlay.registrations["b1:1", "q"].position("p2") == 200
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


class Clock:
    """The driver's monotonic clock, in ns, moved by the test."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_an_outage_is_said_once_shows_in_the_progress_and_the_others_go_on(
    overlay: FakeOverlay, caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    r = reader(clock=clock)
    start = r.initialOffset()
    rows, start, _ = run(r, start, ReadAllAvailable())  # every pubend seen once
    p2 = [overlay.brokers["b2:1"].publish(t) for t in (5, 7)]
    p3 = [overlay.brokers["b3:1"].publish(6)]
    overlay.down.add("b2:1")
    overlay.brokers["b1:1"].leaf_set.append("b3:1")  # its neighbour on the other side of the ring
    rows = []
    for second in range(1, 4):  # three triggers during the outage
        clock.ns = second * 10**9
        overlay.clock = 100 * second  # the overlay's tails go on with the clock
        p3.append(overlay.brokers["b3:1"].publish(100 * second))
        end = r.latestOffset(start, ReadAllAvailable())
        rows += read_batch(r, start, end)
        start = end
        progress = r.reportLatestOffset()
        assert progress is not None
        assert progress["unreachable"] == ["p2"]
        assert progress["pubends"]["p2"] == {"broker": "b2:1", "reachable": False, "tail": 0, "behind_events": None,
                                             "behind_ticks": 100 * second, "unreachable_ms": (second - 1) * 1000}
        assert progress["pubends"]["p3"]["behind_ticks"] == 0 and progress["pubends"]["p3"]["behind_events"] == 0
        assert progress["positions"]["p3"] == 100 * second
    assert sorted(rows) == [(e.pubend, e.tick) for e in p3]
    assert warnings_about(caplog, "pubend p2 at b2:1 is not reachable") == 1
    overlay.down.clear()
    clock.ns = 5 * 10**9
    end = r.latestOffset(start, ReadAllAvailable())
    assert sorted(read_batch(r, start, end)) == [(e.pubend, e.tick) for e in p2]
    assert warnings_about(caplog, "pubend p2 at b2:1 is reachable again after 4.0 s") == 1
    assert r.reportLatestOffset()["unreachable"] == []  # type: ignore[index]


def test_an_outage_longer_than_the_bound_fails_the_query_in_one_line(overlay: FakeOverlay) -> None:
    clock = Clock()
    r = reader(clock=clock, maxPubendOutageMs="30000")
    start = r.initialOffset()
    overlay.down.add("b2:1")
    overlay.brokers["b1:1"].leaf_set.append("b3:1")
    for second in (0, 10, 30):
        clock.ns = second * 10**9
        r.latestOffset(start, ReadAllAvailable())  # within the bound
    clock.ns = 30 * 10**9 + 1
    with pytest.raises(PubendOutageError) as failed:
        r.latestOffset(start, ReadAllAvailable())
    message = str(failed.value)
    assert "\n" not in message
    assert "pubend p2 at b2:1 has been unreachable for 30.0 s, longer than maxPubendOutageMs=30000" in message


def test_the_query_moves_off_its_lost_broker_and_back_with_its_position(
    overlay: FakeOverlay, caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    r = reader(clock=clock)
    start = r.initialOffset()
    start = run(r, start, ReadAllAvailable())[1]  # the overlay seen: b2 and b3 learned
    overlay.down.add("b1:1")  # the query's own broker
    published = [overlay.brokers["b2:1"].publish(5), overlay.brokers["b3:1"].publish(6)]
    rows, start, _ = run(r, start, ReadAllAvailable())  # planned from b2, committed there
    assert sorted(rows) == [(e.pubend, e.tick) for e in published]
    assert overlay.registrations["b2:1", "q"].position("p3") == 6
    overlay.down.clear()
    clock.ns += ENTRY_DEMOTED_NS  # tried first again (until then, after the others)
    published = [overlay.brokers["b1:1"].publish(8), overlay.brokers["b3:1"].publish(9)]
    rows, start, _ = run(r, start, ReadAllAvailable())
    assert sorted(rows) == [(e.pubend, e.tick) for e in published]
    assert overlay.registrations["b1:1", "q"].position("p3") == 9  # back at the named broker
    assert ("b2:1", "q") not in overlay.registrations  # the one held meanwhile is ended
    assert warnings_about(caplog, "ended the one held at b2:1 meanwhile") == 1


def test_a_query_starts_from_the_brokers_option_when_its_broker_is_down(overlay: FakeOverlay) -> None:
    overlay.down.add("b1:1")
    overlay.brokers["b3:1"].leaf_set.append("b2:1")
    overlay.brokers["b3:1"].publish(4)
    with pytest.raises(NoBrokerError, match=r"no broker answers.*b1:1.*\.option\(\"brokers\""):
        reader(clock=Clock()).initialOffset()
    clock = Clock()
    r = reader(clock=clock, brokers="b9:1, b3:1")
    start = r.initialOffset()
    assert Offset.from_json(start).position("p3") == 4 and ("b3:1", "q") in overlay.registrations
    published = [overlay.brokers["b2:1"].publish(5)]
    rows, end, _ = run(r, start, ReadAllAvailable())
    assert rows == [(e.pubend, e.tick) for e in published]
    assert overlay.registrations["b3:1", "q"].position("p2") == 5
    overlay.down.clear()  # the named broker is back: it takes the next commit, the other holder is ended
    clock.ns += ENTRY_DEMOTED_NS
    r.commit(end)
    assert overlay.registrations["b1:1", "q"].position("p2") == 5 and ("b3:1", "q") not in overlay.registrations


def test_an_idle_stream_makes_no_micro_batch_and_moves_only_for_release(overlay: FakeOverlay) -> None:
    clock = Clock()
    r = reader(clock=clock, idleAdvanceIntervalMs="60000")
    start = r.initialOffset()

    def trigger(second: int, other: bool = False) -> dict[str, Any]:
        clock.ns, overlay.clock = second * 10**9, second * 10  # the tails follow the clock
        if other:  # an event on a channel the query does not read
            overlay.brokers["b2:1"].publish(second * 10, channel="other/x")
        return r.latestOffset(start, ReadAllAvailable())

    assert all(trigger(second) == start for second in range(1, 100))  # nothing logged: nothing to release
    assert overlay.reads == []  # the brokers' status said so: nothing was read
    end = trigger(100, other=True)  # over a minute since the query moved: once, for release only
    assert Offset.from_json(end).position("p2") == 1000 and read_batch(r, start, end) == []
    r.commit(end)
    assert overlay.registrations["b1:1", "q"].position("p2") == 1000
    start, asked = end, len(overlay.reads)
    assert overlay.reads == [("p2", 990, 1000)]  # asked once, and the empty batch read nothing
    assert all(trigger(second, other=True) == start for second in range(101, 160))
    assert [(a, e) for _, a, e in overlay.reads[asked:]] == [(10 * s, 10 * s + 10) for s in range(100, 159)]
    assert Offset.from_json(trigger(160, other=True)).position("p2") == 1600
    overlay.brokers["b3:1"].publish(1605)
    end = trigger(161)
    assert read_batch(r, start, end) == [("p3", 1605)]


def test_a_read_whose_broker_is_lost_reads_on_after_its_last_row(overlay: FakeOverlay) -> None:
    published = [overlay.brokers["b2:1"].publish(t) for t in range(1, 30)]
    pauses: list[float] = []
    r = TidingsStreamReader(reader().opts, EVENT_SCHEMA, fake_connect, sleep=pauses.append)
    overlay.break_reads_after = 2  # after two frames of 7 events
    rows = [t for b in r.read(TickRangePartition(0, "p2", "b2:1", 0, 29)) for t in b.column("tick").to_pylist()]
    assert rows == [e.tick for e in published] and pauses == [READ_RETRY_BACKOFF_S[0]]
    assert [after for _, after, _ in overlay.reads] == [0, 14]
    overlay.down.add("b2:1")  # down for good: the task fails after its bounded retries
    with pytest.raises(ConnectionRefusedError):
        list(r.read(TickRangePartition(0, "p2", "b2:1", 0, 29)))
    assert len(pauses) == 1 + len(READ_RETRY_BACKOFF_S)


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


def test_failover_outage_and_idle_options() -> None:
    base = {"broker": "a:1", "pattern": "#", "durableName": "q"}
    opts = parse_stream_options({**base, "brokers": " b:2, c:3,b:2 ", "maxPubendOutageMs": "30000",
                                 "idleAdvanceIntervalMs": "1000"})
    assert (opts.failover, opts.pubend_outage_ms_max, opts.idle_advance_interval_ms) == (("b:2", "c:3"), 30000, 1000)
    opts = parse_stream_options(base)
    assert (opts.failover, opts.pubend_outage_ms_max, opts.idle_advance_interval_ms) == ((), None, 300_000)
    with pytest.raises(ValueError, match=r'"brokers" must be HOST:PORT,HOST:PORT'):
        parse_stream_options({**base, "brokers": "b:2,c"})
    with pytest.raises(ValueError, match='"maxPubendOutageMs" must be between 1'):
        parse_stream_options({**base, "maxPubendOutageMs": "0"})
    with pytest.raises(ValueError, match='"idleAdvanceIntervalMs" must be between 1 and 3600000'):
        parse_stream_options({**base, "idleAdvanceIntervalMs": "86400000"})
    with pytest.raises(ValueError, match=r'"brokers" is an option of spark\.readStream'):
        parse_read_options({"broker": "a:1", "pattern": "#", "brokers": "b:2"})


def test_the_progress_counts_the_events_admission_control_left_behind(overlay: FakeOverlay) -> None:
    r = reader(maxEventsPerTrigger="5")
    start = r.initialOffset()
    for tick in range(1, 9):
        overlay.brokers["b2:1"].publish(tick)
    end = r.latestOffset(start, ReadMaxRows(5))
    assert Offset.from_json(end).position("p2") == 5
    progress = r.reportLatestOffset()
    assert progress is not None and progress["positions"]["p2"] == 8
    assert progress["pubends"]["p2"]["behind_events"] is None  # only the first 5 were read: 3 more unseen
    assert progress["pubends"]["p2"]["behind_ticks"] == 3
    end2 = r.latestOffset(end, ReadMaxRows(5))
    assert Offset.from_json(end2).position("p2") == 8
    assert r.reportLatestOffset()["pubends"]["p2"]["behind_events"] == 0  # type: ignore[index]


def test_a_replayed_batch_waits_a_little_for_its_pubends_broker(overlay: FakeOverlay) -> None:
    r = reader()
    start = r.initialOffset()
    overlay.brokers["b2:1"].publish(5)
    end = r.latestOffset(start, ReadAllAvailable())
    pauses: list[float] = []
    restarted = TidingsStreamReader(r.opts, EVENT_SCHEMA, fake_connect, sleep=pauses.append)
    overlay.down.add("b2:1")
    with pytest.raises(ReadError, match="no broker of the overlay reports pubend p2"):
        restarted.partitions(start, end)  # down for good: the batch cannot be planned
    assert pauses == list(READ_RETRY_BACKOFF_S)
    pauses.clear()
    restarted = TidingsStreamReader(r.opts, EVENT_SCHEMA, fake_connect, sleep=lambda s: (pauses.append(s),
                                                                                          overlay.down.clear()))
    overlay.down.add("b2:1")
    assert read_batch(restarted, start, end) == [("p2", 5)] and pauses == [READ_RETRY_BACKOFF_S[0]]
