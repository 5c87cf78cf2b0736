"""Option parsing and read planning of the `tidings` Spark data source, without Spark."""

from __future__ import annotations

import bisect
import collections
import datetime as dt
import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.event import datetime_to_tick
from tidings.spark.options import PARTITIONS_MAX, ReadOptions, parse_read_options
from tidings.spark.overlay import read_status
from tidings.spark.planning import (
    LogBounds,
    OverlayPlan,
    ReadError,
    bounds_from_status,
    plan_overlay_read,
    plan_read,
    split_at_marks,
    split_ticks,
)

BASE = {"broker": "127.0.0.1:7400", "pattern": "nodes/+/load"}


def parse(**extra: str) -> ReadOptions:
    return parse_read_options({**BASE, **extra})


# --- options ---------------------------------------------------------------------------------------


def test_defaults() -> None:
    opts = parse_read_options(BASE, default_partitions=3)
    assert opts == ReadOptions(
        broker="127.0.0.1:7400", pattern="nodes/+/load", filter=None, start_tick=None, end_tick=None,
        partitions=3, fail_on_data_loss=True,
    )


def test_credential_and_tls_ca() -> None:
    opts = parse(credential="reader:c2VjcmV0", tlsCa="/etc/tidings/ca.pem")
    assert (opts.credential, opts.tls_ca) == ("reader:c2VjcmV0", "/etc/tidings/ca.pem")
    with pytest.raises(ValueError, match='"credential" must be NAME:SECRET'):
        parse(credential="no-secret")


def test_keys_are_case_insensitive_as_spark_lower_cases_them() -> None:
    lowered = {"broker": "h:1", "pattern": "a/#", "starttick": "5", "endtick": "9",
               "failondataloss": "FALSE", "partitions": "4"}
    opts = parse_read_options(lowered)
    assert (opts.start_tick, opts.end_tick, opts.fail_on_data_loss, opts.partitions) == (5, 9, False, 4)
    mixed = parse_read_options({"Broker": "h:1", "PATTERN": "a/#", "startTick": "5"})
    assert mixed.start_tick == 5


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"pattern": "a/#"}, '"broker" is required'),
        ({"broker": "  ", "pattern": "a/#"}, '"broker" is required'),
        ({"broker": "localhost", "pattern": "a/#"}, '"broker" must be HOST:PORT'),
        ({"broker": "localhost:http", "pattern": "a/#"}, '"broker" must be HOST:PORT'),
        ({"broker": "localhost:70000", "pattern": "a/#"}, '"broker" must be HOST:PORT'),
        ({"broker": "h:1"}, '"pattern" is required'),
        ({"broker": "h:1", "pattern": "a/b#"}, '"pattern" is invalid'),
        ({"broker": "h:1", "pattern": "#/a"}, '"pattern" is invalid'),
        ({"broker": "h:1", "pattern": ""}, '"pattern" is invalid'),
    ],
)
def test_missing_or_bad_broker_and_pattern(options: dict[str, str], names: str) -> None:
    with pytest.raises(ValueError, match=names):
        parse_read_options(options)


def test_ipv6_broker_is_accepted() -> None:
    assert parse(broker="[::1]:7400").broker == "[::1]:7400"


def test_unknown_option_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown option 'endTik'.*endTick"):
        parse(endTik="5")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("startTick", "12.5", '"startTick" must be an integer tick'),
        ("endTick", "soon", '"endTick" must be an integer tick'),
        ("startTick", "-1", '"startTick" must be between 0'),
        ("endTick", str(2**63), '"endTick" must be between 0'),
        ("startTime", "yesterday", '"startTime" must be an ISO-8601 time'),
        ("endTime", "2026-13-01T00:00:00Z", '"endTime" must be an ISO-8601 time'),
        ("startTime", "1969-12-31T23:59:59Z", '"startTime" must not be before 1970'),
        ("partitions", "0", '"partitions" must be between 1'),
        ("partitions", str(PARTITIONS_MAX + 1), '"partitions" must be between 1'),
        ("partitions", "two", '"partitions" must be an integer'),
        ("failOnDataLoss", "no", '"failOnDataLoss" must be "true" or "false"'),
    ],
)
def test_bad_values_name_their_option(key: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(**{key: value})


def test_tick_and_time_for_one_bound_conflict() -> None:
    with pytest.raises(ValueError, match='"startTick" or "startTime", not both'):
        parse(startTick="1", startTime="2026-11-22T10:00:00Z")


def test_start_after_end_is_refused() -> None:
    with pytest.raises(ValueError, match=r"start of the range \(tick 10\) is after its end \(tick 9\)"):
        parse(startTick="10", endTick="9")
    with pytest.raises(ValueError, match="after its end"):
        parse(startTime="2026-11-22T11:00:00Z", endTime="2026-11-22T10:00:00Z")
    assert parse(startTick="9", endTick="9").start_tick == 9  # one tick is a valid range


def test_times_become_ticks_in_utc() -> None:
    opts = parse(startTime="2026-11-22T10:00:00Z", endTime="2026-11-22T12:30:00.000250+02:00")
    assert opts.start_tick == datetime_to_tick(dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC))
    assert opts.end_tick == datetime_to_tick(dt.datetime(2026, 11, 22, 10, 30, 0, 250, tzinfo=dt.UTC))
    naive = parse(startTime="2026-11-22T10:00:00")
    assert naive.start_tick == opts.start_tick  # no offset: UTC


def test_time_and_tick_bounds_mix() -> None:
    opts = parse(startTime="1970-01-01T00:00:01Z", endTick="2000000")
    assert (opts.start_tick, opts.end_tick) == (1_000_000, 2_000_000)


def test_filter_is_kept_and_blank_filter_is_none() -> None:
    assert parse(filter="load > 2.5").filter == "load > 2.5"
    assert parse(filter="   ").filter is None


def test_bad_filter_is_named_when_the_filter_language_exists() -> None:
    filters = pytest.importorskip("tidings.core.filters")
    if not hasattr(filters, "parse_filter"):
        pytest.skip("tidings.core.filters.parse_filter does not exist yet")
    with pytest.raises(ValueError, match='"filter" is invalid'):
        parse(filter="load >")


def test_default_partitions_are_bounded() -> None:
    assert parse_read_options(BASE, default_partitions=0).partitions == 1
    assert parse_read_options(BASE, default_partitions=10**9).partitions == PARTITIONS_MAX


# --- status ----------------------------------------------------------------------------------------


def test_bounds_from_status() -> None:
    status = {"pubend": "p", "first_tick": 10, "last_tick": 20, "released_through": 5, "other": 1}
    assert bounds_from_status(status) == LogBounds(10, 20, 5)
    assert bounds_from_status({"first_tick": None, "last_tick": None}) == LogBounds(None, None, None)


@pytest.mark.parametrize(
    "status",
    [
        {"first_tick": "10", "last_tick": 20},
        {"first_tick": 10, "last_tick": -3},
        {"first_tick": True, "last_tick": 20},
        {"first_tick": 30, "last_tick": 20},
        {"first_tick": 30, "last_tick": None},
    ],
)
def test_bad_status_is_a_clear_error(status: dict[str, object]) -> None:
    with pytest.raises(ReadError, match="status"):
        bounds_from_status(status)


# --- planning --------------------------------------------------------------------------------------


def test_split_ticks_tiles_evenly() -> None:
    assert split_ticks(0, 9, 3) == ((0, 3), (3, 6), (6, 9))
    assert split_ticks(0, 10, 3) == ((0, 3), (3, 6), (6, 10))
    assert split_ticks(5, 7, 4) == ((5, 6), (6, 7))  # never an empty range
    assert split_ticks(5, 6, 1) == ((5, 6),)


@given(
    after=st.integers(min_value=0, max_value=2**62),
    width=st.integers(min_value=1, max_value=2**40),
    parts=st.integers(min_value=1, max_value=64),
)
def test_split_ticks_is_a_contiguous_tiling(after: int, width: int, parts: int) -> None:
    end = after + width
    ranges = split_ticks(after, end, parts)
    assert len(ranges) == min(parts, width)
    assert ranges[0][0] == after and ranges[-1][1] == end
    assert all(a < e for a, e in ranges)
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1))
    widths = [e - a for a, e in ranges]
    assert max(widths) - min(widths) <= 1


def test_whole_log_by_default() -> None:
    plan = plan_read(None, None, LogBounds(101, 200, 100), 2)
    assert plan.ranges == ((100, 150), (150, 200))
    assert plan.lost is None


def test_end_in_the_future_is_clamped_to_the_durable_tail() -> None:
    plan = plan_read(150, 10**15, LogBounds(101, 200, None), 1)
    assert plan.ranges == ((149, 200),)


def test_inclusive_bounds_become_half_open_ranges() -> None:
    plan = plan_read(120, 129, LogBounds(101, 200, 100), 1)
    assert plan.ranges == ((119, 129),)  # ticks 120..129


def test_start_before_the_log_balances_over_the_retained_ticks() -> None:
    # nothing was ever released: the early start costs nothing, and the first task still starts
    # where the user asked so that a gap the broker knows of would reach it
    plan = plan_read(1, None, LogBounds(1001, 1100, None), 4)
    assert plan.lost is None
    assert plan.ranges == ((0, 1025), (1025, 1050), (1050, 1075), (1075, 1100))


def test_tick_marks_balance_the_events_not_the_ticks() -> None:
    # every event in ticks 101..200, then a quiet tail to the durable tail 10,000 (ticks follow the
    # clock): cut by ticks, the first task would get every event; the marks cut the log's bytes
    marks = tuple(range(111, 201, 10))  # 9 marks: 10 runs of about equal bytes
    plan = plan_read(None, None, LogBounds(101, 10_000, 0, marks), 2)
    assert plan.ranges == ((100, 150), (150, 10_000))  # the record at tick 151 begins the second
    assert split_at_marks(100, 10_000, 5, marks) == ((100, 120), (120, 140), (140, 160), (160, 180), (180, 10_000))


def test_tick_marks_outside_the_range_or_too_few_fall_back_to_ticks() -> None:
    assert split_at_marks(100, 200, 3, (50, 150, 250)) == ()  # one mark inside: 2 runs for 3 tasks
    assert split_at_marks(100, 200, 1, (150,)) == ()
    plan = plan_read(121, None, LogBounds(101, 200, 0, (111, 131, 151, 171)), 2)
    assert plan.ranges == ((120, 150), (150, 200))  # marks 131..171: cuts 130, 150, 170 -> the middle


@given(st.integers(0, 10**6), st.integers(1, 10**6), st.integers(1, 40),
       st.lists(st.integers(0, 3 * 10**6), max_size=40, unique=True))
def test_split_at_marks_is_a_contiguous_tiling(after: int, width: int, parts: int, marks: list[int]) -> None:
    end = after + width
    ranges = split_at_marks(after, end, parts, tuple(sorted(marks)))
    if ranges:
        assert len(ranges) == parts and ranges[0][0] == after and ranges[-1][1] == end
        assert all(a < e for a, e in ranges)
        assert all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1))
        assert all(e + 1 in marks for _, e in ranges[:-1])  # each cut is just before a mark


def test_status_tick_marks_are_checked() -> None:
    status = {"pubend": "p1", "last_tick": 500, "released_through": 0, "first_tick": 100}
    assert read_status("b:1", status)[1].marks == ()  # an older broker sends none
    assert read_status("b:1", {**status, "tick_marks": [200, 300]})[1].marks == (200, 300)
    for bad in ([300, 200], [1.5], "200", [-1], list(range(1, 1000))):
        with pytest.raises(ReadError, match="tick_marks"):
            read_status("b:1", {**status, "tick_marks": bad})


def test_start_before_released_ticks_is_a_planning_time_gap() -> None:
    plan = plan_read(50, 300, LogBounds(201, 300, 180), 2)
    assert plan.lost == (49, 180)
    assert plan.ranges == ((180, 250), (250, 300))


def test_start_just_after_the_released_ticks_loses_nothing() -> None:
    assert plan_read(181, None, LogBounds(201, 300, 180), 1).lost is None
    assert plan_read(180, None, LogBounds(201, 300, 180), 1).lost == (179, 180)


def test_empty_log_and_empty_ranges() -> None:
    assert plan_read(None, None, LogBounds(None, None, None), 3).ranges == ()
    assert plan_read(5, 10, LogBounds(None, None, None), 3).ranges == ()
    # everything released: nothing retained to read, and nothing asked for is lost
    assert plan_read(None, None, LogBounds(None, 300, 300), 3).ranges == ()
    assert plan_read(None, None, LogBounds(None, 300, 300), 3).lost is None
    # a range wholly after the tail, or wholly before the log
    assert plan_read(400, 500, LogBounds(100, 300, None), 3).ranges == ()
    assert plan_read(10, 20, LogBounds(100, 300, None), 3).ranges == ((9, 20),)


def test_fewer_ticks_than_partitions() -> None:
    assert plan_read(5, 6, LogBounds(1, 300, None), 8).ranges == ((4, 5), (5, 6))


@st.composite
def log_bounds(draw: st.DrawFn) -> LogBounds:
    first = draw(st.integers(min_value=1, max_value=10_000))
    last = first + draw(st.integers(min_value=0, max_value=10_000))
    released_gap = draw(st.one_of(st.none(), st.integers(min_value=1, max_value=500)))
    return LogBounds(first, last, None if released_gap is None else max(0, first - released_gap))


@given(
    bounds=log_bounds(),
    start=st.one_of(st.none(), st.integers(min_value=0, max_value=25_000)),
    span=st.one_of(st.none(), st.integers(min_value=0, max_value=25_000)),
    parts=st.integers(min_value=1, max_value=16),
)
def test_plan_reads_every_requested_retained_tick_once(
    bounds: LogBounds, start: int | None, span: int | None, parts: int
) -> None:
    first, last, released = bounds.first_tick, bounds.last_tick, bounds.released_through
    assert first is not None and last is not None
    end = None if span is None else (start or 0) + span
    plan = plan_read(start, end, bounds, parts)
    assert len(plan.ranges) <= parts
    covered = [t for a, e in plan.ranges for t in range(max(a + 1, first), e + 1)]
    want_lo = max(first, start if start is not None else first)
    want_hi = min(last, end if end is not None else last)
    assert covered == list(range(want_lo, want_hi + 1))  # in order, no duplicate, no hole
    assert all(0 <= a < e for a, e in plan.ranges)
    after = None if start is None else max(start, 1) - 1  # no event has tick 0: startTick=0 is startTick=1
    if plan.lost is not None:
        assert after is not None and released is not None
        assert plan.lost == (after, released)
    else:
        assert after is None or released is None or after >= released


# --- startingOffsets / endingOffsets of a batch read ----------------------------------------------


def test_batch_offsets_take_earliest_latest_json_offsets_and_tokens() -> None:
    from tidings.core.durable.checkpoint import Checkpoint
    from tidings.spark.offsets import Offset
    from tidings.spark.options import TickVector

    assert parse(startingOffsets="earliest", endingOffsets="LATEST").starting is None
    opts = parse(startingOffsets='{"pa": 100, "pb": 7}', endingOffsets='{"pa": 200}')
    assert opts.starting == TickVector(None, {"pa": 100, "pb": 7}) and opts.ending == TickVector(None, {"pa": 200})
    assert (opts.starting.get("pc"), opts.ending.get("pb")) == (None, None)
    token = Checkpoint(50, {"pa": 120}).encode()
    assert parse(startingOffsets=token).starting == TickVector(50, {"pa": 120})
    offset = json.dumps(Offset.make(60, {"pa": 150}, 1, 5).to_json())
    assert parse(endingOffsets=offset).ending == TickVector(60, {"pa": 150})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "latest"}, r'"startingOffsets" of a batch read cannot be "latest".*"durableName"'),
        ({"endingOffsets": "earliest"}, r'"endingOffsets" of a batch read cannot be "earliest"'),
        ({"startingOffsets": "tk1.AAAA"}, r'"startingOffsets" is not a valid checkpoint token'),
        ({"endingOffsets": "{nope"}, r'"endingOffsets" of a batch read must be "latest" or a checkpoint token'),
        ({"startingOffsets": "2026-11-22T10:00:00Z"}, r'must be "earliest" or .*a streaming read .*"durableName"'),
        ({"endingOffsets": "{}"}, r'"endingOffsets" must be .*1 to \d+ pubends'),
        ({"startingOffsets": '{"pa": -1}'}, r'"startingOffsets" maps each pubend to a tick'),
        ({"startingOffsets": '{"pa": true}'}, r'"startingOffsets" maps each pubend to a tick'),
        ({"startingOffsets": '{"": 5}'}, r'"startingOffsets" maps each pubend to a tick'),
        ({"endingOffsets": '{"default": 1, "lost": {}, "positions": {}}'}, r'"endingOffsets" is not a valid offset'),
        ({"startingOffsets": '{"pa": 5}', "startTick": "3"}, r'"startingOffsets" or startTick/startTime, not both'),
        ({"endingOffsets": '{"pa": 5}', "endTime": "2026-11-22T10:00:00Z"}, r'"endingOffsets" or endTick/endTime'),
        ({"startingOffsets": '{"pa": 50}', "endingOffsets": '{"pa": 40}'},
         "start after tick 50 and end at tick 40 for pubend pa"),
        ({"startingOffsets": '{"pa": 50}', "endTick": "40"}, "for pubend pa"),
        ({"startTick": "60", "endingOffsets": '{"pb": 50}'}, "for pubend pb"),
    ],
)
def test_bad_batch_offsets_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse(**options)
    assert "\n" not in str(caught.value)


def test_a_read_may_end_where_it_starts() -> None:
    assert parse(startingOffsets='{"pa": 50}', endingOffsets='{"pa": 50}').ending is not None


# --- balanced partitions -----------------------------------------------------------------------------


def fake_log(ticks: list[int], runs: int = 256) -> LogBounds:
    """The bounds a broker reports for a log of these ticks (records of one size): its tick marks
    cut it into `runs` runs of equal bytes, as EventLog.tick_marks does (deduplicated)."""
    marks = sorted({ticks[len(ticks) * i // runs] for i in range(1, runs)} - {ticks[0]})
    return LogBounds(ticks[0], ticks[-1], 0, tuple(marks), len(ticks))


def task_rows(plan: OverlayPlan, logs: dict[str, list[int]]) -> list[int]:
    """Rows per task, checking that the tasks' ranges read every tick of every log exactly once."""
    seen: collections.Counter[tuple[str, int]] = collections.Counter()
    rows = []
    for task in plan.tasks:
        count = 0
        for r in task:
            ticks = logs[r.pubend]
            inside = ticks[bisect.bisect_right(ticks, r.after):bisect.bisect_right(ticks, r.end)]
            seen.update((r.pubend, t) for t in inside)
            count += len(inside)
        rows.append(count)
    assert seen == collections.Counter((p, t) for p, ticks in logs.items() for t in ticks)
    return rows


def skewed_logs(seed: int, sizes: tuple[int, ...]) -> dict[str, list[int]]:
    """Logs of these sizes whose events come in bursts separated by quiet spells (ticks are
    microseconds, so a quiet minute is 60,000,000 ticks holding nothing)."""
    rng = random.Random(seed)
    logs = {}
    for i, size in enumerate(sizes):
        tick, ticks = 1_000_000 + rng.randrange(1000), []
        while len(ticks) < size:
            tick += rng.choice((1, 1, 2, 5, 60_000_000)) if rng.random() < 0.001 else rng.randint(1, 3)
            ticks.append(tick)
        logs[f"p{i}"] = ticks
    return logs


def test_partitions_are_cut_by_events_across_pubends_of_skewed_sizes() -> None:
    """The issue's overlay: one pubend with 2/3 of the events, one 1/3, one a sliver; with 2
    partitions one task read 705,400 of 1,051,902 rows, with 8 they ranged from 2,444 to 373,058."""
    logs = skewed_logs(1, (70_540, 34_406, 244))
    bounds = {p: (f"b{p}:1", fake_log(t)) for p, t in logs.items()}
    for partitions in (2, 3, 8, 16):
        plan = plan_overlay_read(None, None, bounds, partitions)
        rows = task_rows(plan, logs)
        mean = sum(rows) / len(rows)
        assert len(rows) == partitions and max(rows) <= 1.1 * mean, (partitions, rows)
    # a range of each log: the counts inside it, not the logs' sizes, decide
    lo, hi = logs["p1"][10_000], logs["p1"][20_000]
    plan = plan_overlay_read(lo, hi, bounds, 8)
    inside = {p: [t for t in ticks if lo <= t <= hi] for p, ticks in logs.items()}
    rows = task_rows(plan, {p: t for p, t in inside.items() if t})
    assert max(rows) <= 2 * sum(rows) / len(rows), rows


def test_a_burst_in_a_small_log_still_gets_the_partitions_asked_for() -> None:
    """A log too small for tick marks inside the range counts its records as linear in the tick
    between its ends: 261 events published within 8 ms of a log spanning a second read as 2, and
    the read got 2 tasks (Spark planned 1) where 3 were asked for (tests/spark/test_spark_source.py)."""
    ticks = [*range(1_000_000, 1_000_040), *range(1_007_000, 1_007_261), *range(2_000_000, 2_000_059)]
    bounds = {"pa": ("a:1", LogBounds(ticks[0], ticks[-1], 0, (), len(ticks)))}
    plan = plan_overlay_read(1_007_000, 1_007_260, bounds, 3)
    rows = task_rows(plan, {"pa": [t for t in ticks if 1_007_000 <= t <= 1_007_260]})
    assert len(rows) == 3 and sum(rows) == 261


@given(sizes=st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=6),
       partitions=st.integers(min_value=1, max_value=40), seed=st.integers(min_value=0, max_value=1000))
def test_balanced_tasks_tile_every_log_and_stay_near_the_mean(sizes: list[int], partitions: int, seed: int) -> None:
    logs = skewed_logs(seed, tuple(sizes))
    plan = plan_overlay_read(None, None, {p: (f"{p}:1", fake_log(t)) for p, t in logs.items()}, partitions)
    rows = task_rows(plan, logs)
    assert len(rows) <= partitions and all(r.end - r.after > 0 for task in plan.tasks for r in task)
    total = sum(sizes)
    if total >= 256 * partitions:  # every task is many runs of the marks wide: within 2x the mean
        assert max(rows) <= 2 * total / len(rows), rows


def test_a_broker_without_record_counts_falls_back_to_a_share_per_pubend() -> None:
    logs = {"pa": ("a:1", LogBounds(101, 200, 0)), "pb": ("b:1", LogBounds(101, 400, 0))}
    plan = plan_overlay_read(None, None, logs, 4)
    assert [(r.pubend, r.after, r.end) for r in plan.ranges] == [
        ("pa", 100, 150), ("pa", 150, 200), ("pb", 100, 250), ("pb", 250, 400)]
    assert plan.tasks == tuple((r,) for r in plan.ranges)


def test_per_pubend_bounds_from_offsets() -> None:
    logs = {"pa": ("a:1", fake_log(list(range(101, 201)))), "pb": ("b:1", fake_log(list(range(101, 201))))}
    plan = plan_overlay_read(None, None, logs, 1, {"pa": (151, 180), "pb": (None, 120)})
    assert [(r.pubend, r.after, r.end) for r in plan.ranges] == [("pa", 150, 180), ("pb", 100, 120)]


def test_a_streaming_read_with_bad_options_fails_at_its_first_call_naming_the_option() -> None:
    """PySpark 4.3 answers an exception from streamReader() with its own UnboundLocalError
    ('reader'), so the refusal comes from the reader's first call, with the option's name."""
    import pickle

    from tidings.spark.arrow import EVENT_SCHEMA
    from tidings.spark.source import RefusedStreamReader, TidingsDataSource

    for options, message in (({**BASE}, '"durableName" is required'),
                             ({**BASE, "durableName": "q", "startingOffsets": "tk1.xx"}, "not a valid checkpoint")):
        reader = TidingsDataSource(options).streamReader(EVENT_SCHEMA)
        assert isinstance(reader, RefusedStreamReader)
        restored = pickle.loads(pickle.dumps(reader))
        with pytest.raises(ValueError, match=message):
            restored.initialOffset()
        with pytest.raises(ValueError, match=message):
            restored.latestOffset({}, None)
        with pytest.raises(ValueError, match=message):
            restored.partitions({}, {})
        restored.stop()
