"""Planning a batch read: from the user's inclusive tick bounds and each pubend's log bounds to a
list of contiguous half-open tick ranges `(after, end]` of one pubend each, one per Spark task.

The read covers every pubend of the overlay (overlay.py finds them and the broker that logs each).
The bounds apply per pubend, as a checkpoint token's vector does: the read is the events between
the vectors {p: start - 1} and {p: min(end, p's durable tail)}.

Why the read is a consistent snapshot, read exactly once:

- The end of the read is fixed once per pubend, on the driver, when the read is planned: the
  requested end clamped to that pubend's durable tail (`last_tick`). Ticks are strictly increasing per pubend and only
  durable events are served, so no event can later appear at a tick at or below that end: every task,
  and every retry of a task, sees the same events.
- Each pubend's ranges tile its `(after, end]` without overlap or hole, so each event belongs to
  exactly one task.
- Retention is the one thing that can change a range under a task. Events released before the read
  began are seen here, through the status field `released_through`, and become a planning-time gap;
  events released while the read runs reach the task as a GAP from the broker. Either way the read
  fails, or with failOnDataLoss=false skips them and says so: never a silent loss.

Pure functions: no Spark, no broker, no clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from math import ceil
from typing import Any

from tidings.core.errors import DATA_LOSS, TidingsError

FILL_SLACK = 1e-9  # a task this close to its share is full (float sums of shares)


class ReadError(TidingsError, RuntimeError):
    """The broker's answers do not allow the read to go on."""

    code = "spark-read"


class DataLossError(ReadError):
    """Events in the requested range were released by retention before the read got them."""

    code = DATA_LOSS

    def __init__(self, pattern: str, after_tick: int, through_tick: int, pubend: str | None = None) -> None:
        of = "" if pubend is None else f" of pubend {pubend}"
        super().__init__(
            f"tidings read of {pattern!r}: events{of} after tick {after_tick} up to tick {through_tick} "
            "were released by the broker's retention before this read could get them; "
            'read a later range, or set .option("failOnDataLoss", "false") to skip them'
        )
        self.after_tick = after_tick
        self.through_tick = through_tick
        self.pubend = pubend


@dataclass(frozen=True, slots=True)
class LogBounds:
    """The part of a pubend log the broker reports: ticks retained and ticks released."""

    first_tick: int | None  # oldest retained tick; None when nothing is retained
    last_tick: int | None  # durable tail; None when nothing was ever logged
    released_through: int | None  # every tick <= this was released; None when the broker does not say
    marks: tuple[int, ...] = ()  # rising ticks cutting the retained log into runs of about equal bytes
    records: int | None = None  # records retained (the status's log_records); None when not reported


@dataclass(frozen=True, slots=True)
class PubendRange:
    """The ticks `(after, end]` of `pubend` that one task reads from the broker at `address`."""

    pubend: str
    address: str
    after: int
    end: int


@dataclass(frozen=True, slots=True)
class OverlayPlan:
    ranges: tuple[PubendRange, ...]  # per pubend contiguous, each end > after
    lost: tuple[tuple[str, int, int], ...]  # (pubend, after, through) released before the read
    tasks: tuple[tuple[PubendRange, ...], ...] = ()  # the ranges grouped into Spark tasks, in order


@dataclass(frozen=True, slots=True)
class ReadPlan:
    ranges: tuple[tuple[int, int], ...]  # (after, end] per task, contiguous, each end > after
    lost: tuple[int, int] | None  # (after, through] released before the read: a planning-time gap


def bounds_from_status(status: Mapping[str, Any]) -> LogBounds:
    """Read the log bounds out of a broker STATUS reply, checking their types (the broker is a peer)."""

    def tick(name: str) -> int | None:
        value = status.get(name)
        if value is None:
            return None
        if type(value) is not int or value < 0:
            raise ReadError(f"the broker's status has {name}={value!r}; expected a tick or nothing")
        return value

    bounds = LogBounds(tick("first_tick"), tick("last_tick"), tick("released_through"))
    if bounds.first_tick is not None and (bounds.last_tick is None or bounds.first_tick > bounds.last_tick):
        raise ReadError(
            "the broker's status is inconsistent: "
            f"first_tick={bounds.first_tick}, last_tick={bounds.last_tick}"
        )
    return bounds


def plan_read(start_tick: int | None, end_tick: int | None, bounds: LogBounds, partitions: int) -> ReadPlan:
    """Split the inclusive request [start_tick, end_tick] (None: unbounded) over at most `partitions`
    ranges of the retained log.

    The first range starts where the user asked, not at the oldest retained tick, so that a gap the
    broker knows about is still met by the task that reads it. The split itself is balanced over
    the retained ticks only, so a start long before the log's first event does not pile every event
    into the last task; and where the broker reports its log's tick marks, over its bytes rather
    than its ticks (split_at_marks), so that neither a burst of events nor a quiet tail after the
    last event (ticks follow the clock) piles them into one task.
    """
    assert partitions >= 1
    lost: tuple[int, int] | None = None
    released = bounds.released_through
    if start_tick is None:
        # "from the oldest retained event": nothing before it was asked for, so nothing is lost
        if bounds.first_tick is None:
            return ReadPlan((), None)
        after = bounds.first_tick - 1
    else:
        # the wire carries `after` as a tick >= 0; tick 0 is never an event's (ticks come from the
        # clock), so a start at tick 0 asks for nothing a log with released_through=0 lacks
        after = max(start_tick - 1, 0)
        if released is not None and after < released:
            lost = (after, released)
            after = released
    after = max(after, 0)
    if bounds.last_tick is None:
        return ReadPlan((), lost)
    end = bounds.last_tick if end_tick is None else min(end_tick, bounds.last_tick)
    if end <= after:
        return ReadPlan((), lost)
    floor = after if bounds.first_tick is None else max(after, bounds.first_tick - 1)
    if floor >= end:  # the range ends before the oldest retained event: one task asks the broker
        return ReadPlan(((after, end),), lost)
    ranges = split_at_marks(floor, end, partitions, bounds.marks) or split_ticks(floor, end, partitions)
    first_end = ranges[0][1]
    return ReadPlan(((after, first_end), *ranges[1:]), lost)


def plan_overlay_read(start_tick: int | None, end_tick: int | None,
                      logs: Mapping[str, tuple[str, LogBounds]], partitions: int,
                      per_pubend: Mapping[str, tuple[int | None, int | None]] | None = None) -> OverlayPlan:
    """The read of every pubend of the overlay: `logs` maps each pubend to the address of the
    broker that logs it and its log bounds. The inclusive request [start_tick, end_tick] applies
    to each pubend as a checkpoint token's vector does: pubend p is read over
    (start_tick - 1, min(end_tick, p's durable tail)]; `per_pubend` gives some pubends bounds of
    their own (a read from or to a token).

    Where every broker reports its log's record count, the ranges are cut by events
    (`balance`): `partitions` tasks of about equal counts, a task reading one or several
    ranges, so a pubend holding most of the events gets most of the tasks and small pubends
    share one. Otherwise the partitions are shared out evenly among the pubends with something
    to read, at least one range (one task) each."""
    assert partitions >= 1

    def bounds_of(pubend: str) -> tuple[int | None, int | None]:
        return (per_pubend or {}).get(pubend, (start_tick, end_tick))

    plans = {p: plan_read(*bounds_of(p), bounds, 1) for p, (_, bounds) in sorted(logs.items())}
    lost = tuple((p, *plan.lost) for p, plan in plans.items() if plan.lost is not None)
    reading = [p for p, plan in plans.items() if plan.ranges]
    if reading and all(logs[p][1].records is not None for p in reading):
        spans = [(p, logs[p][0], plans[p].ranges[0][0], plans[p].ranges[-1][1], logs[p][1]) for p in reading]
        tasks = balance(spans, partitions)
        return OverlayPlan(tuple(r for task in tasks for r in task), lost, tasks)
    share = max(1, partitions // max(1, len(reading)))
    ranges: list[PubendRange] = []
    for pubend in reading:
        address, bounds = logs[pubend]
        ranges += [PubendRange(pubend, address, a, e)
                   for a, e in plan_read(*bounds_of(pubend), bounds, share).ranges]
    return OverlayPlan(tuple(ranges), lost, tuple((r,) for r in ranges))


def record_knots(bounds: LogBounds) -> list[tuple[int, float]]:
    """The log's cumulative record count as knots (tick, records at or below it), rising in both:
    the tick marks cut the retained log into runs of about equal bytes, so, for events of similar
    size, of about `records / runs` records each. Between knots the count is taken as linear in
    the tick. Empty when the log holds nothing or does not report its count."""
    first, last, records = bounds.first_tick, bounds.last_tick, bounds.records
    if first is None or last is None or not records:
        return []
    marks = [m for m in bounds.marks if first < m <= last]
    per_run = records / (len(marks) + 1)
    knots = [(first - 1, 0.0), *((m - 1, (i + 1) * per_run) for i, m in enumerate(marks)), (last, float(records))]
    out: list[tuple[int, float]] = []
    for tick, count in knots:
        if out and tick <= out[-1][0]:
            out[-1] = (out[-1][0], max(out[-1][1], count))
        else:
            out.append((tick, count))
    return out


def records_through(knots: list[tuple[int, float]], tick: int) -> float:
    """About how many records of the log have ticks at or below `tick` (`record_knots`)."""
    if not knots or tick <= knots[0][0]:
        return 0.0
    if tick >= knots[-1][0]:
        return knots[-1][1]
    i = bisect_right([t for t, _ in knots], tick)
    (t0, c0), (t1, c1) = knots[i - 1], knots[i]
    return c0 + (c1 - c0) * (tick - t0) / (t1 - t0)


def tick_holding(knots: list[tuple[int, float]], count: float) -> int:
    """The smallest tick at or below which about `count` records lie (the inverse of
    records_through); the last knot's tick when the log holds fewer."""
    for (t0, c0), (t1, c1) in pairwise(knots):
        if c1 >= count:
            return t0 + max(0, ceil((count - c0) * (t1 - t0) / (c1 - c0))) if c1 > c0 else t1
    return knots[-1][0] if knots else 0


def balance(spans: list[tuple[str, str, int, int, LogBounds]], tasks: int) -> tuple[tuple[PubendRange, ...], ...]:
    """Cut each span (pubend, address, after, end, its log's bounds) into ranges and group them
    into at most `tasks` tasks of about equal record counts.

    The spans are laid end to end, in the order given, and cut every `total / tasks` records
    (by `record_knots`: the count is known at the tick marks and taken as linear in between), so
    a task is a run of whole spans and parts of at most two: each pubend's ranges still tile its
    (after, end], so each event is read by one task. A task reading several ranges reads them one
    after another. The estimate errs by at most about one run of a log (1/256 of it, from the
    broker's marks) per cut, which is what keeps every task near the mean."""
    assert tasks >= 1 and spans
    counted = [(p, a, after, end, record_knots(b)) for p, a, after, end, b in spans]
    total = sum(records_through(k, end) - records_through(k, after) for _, _, after, end, k in counted)
    # the tasks asked for, unless the logs hold fewer records: the count inside the range is taken
    # as linear between the broker's marks, too coarse for a range narrower than one run (in a
    # small log, a burst of 261 events between two quiet spells reads as 2 or 3 records)
    count = max(1, min(tasks, sum(b.records or 0 for *_, b in spans)))
    target = total / count
    done: list[tuple[PubendRange, ...]] = []
    current: list[PubendRange] = []
    fill = 0.0
    for pubend, address, after, end, knots in counted:
        position, at, stop = after, records_through(knots, after), records_through(knots, end)
        while position < end:
            room = target - fill
            if stop - at <= room or len(done) == count - 1:  # the rest of the span fits (the last task: takes all)
                current.append(PubendRange(pubend, address, position, end))
                fill += stop - at
                if fill >= target * (1 - FILL_SLACK) and len(done) < count - 1:
                    done.append(tuple(current))
                    current, fill = [], 0.0
                break
            cut = min(max(tick_holding(knots, at + room), position + 1), end)
            current.append(PubendRange(pubend, address, position, cut))
            done.append(tuple(current))
            current, fill = [], 0.0
            position, at = cut, records_through(knots, cut)
    if current:
        done.append(tuple(current))
    return tuple(done)


def split_at_marks(after: int, end: int, parts: int, marks: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """Tile (after, end] with `parts` contiguous ranges cut just before tick marks (a range ends at
    a mark's tick - 1, so the marked record begins the next), holding about equal shares of the
    marked runs inside; () when fewer than `parts - 1` marks fall inside."""
    cuts = [m - 1 for m in marks if after < m - 1 < end]
    pieces = len(cuts) + 1
    if parts < 2 or pieces < parts:
        return ()
    chosen = [after, *(cuts[i * pieces // parts - 1] for i in range(1, parts)), end]
    return tuple((chosen[i], chosen[i + 1]) for i in range(parts))


def split_ticks(after: int, end: int, parts: int) -> tuple[tuple[int, int], ...]:
    """Tile (after, end] with min(parts, end - after) non-empty contiguous ranges of near-equal width."""
    assert end > after and parts >= 1
    width = end - after
    count = min(parts, width)
    cuts = [after + width * i // count for i in range(count + 1)]
    return tuple((cuts[i], cuts[i + 1]) for i in range(count))
