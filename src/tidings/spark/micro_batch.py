"""Planning one micro-batch of the streaming read: how far it goes, what it lost, who reads what.

Theory of operation. Spark asks the source for the end of the next micro-batch given its start
(two offsets, offsets.py), then for the partitions between them, all on the driver.

- **The end** is each pubend's durable tail (`last_tick` in its broker's status, the latest tick
  its log acknowledged), found over the whole overlay. Only durable events are served and ticks
  only rise per pubend, so nothing can later appear at or below that end: a micro-batch replayed
  after a crash reads exactly what it read the first time. Under Trigger.AvailableNow the end is
  also capped at the tails seen when the query started.
- **Admission control** (`maxEventsPerTrigger`): the end is pulled back so that at most that many
  events lie between start and end. Given the first matching ticks of each pubend after the start,
  `admit` takes the earliest events in (tick, pubend) order and ends each pubend just before its
  first event not taken. A pubend whose events were all seen ends at its tail. At least one event
  is always taken, so a query always progresses.
- **Losses.** A pubend whose log released ticks above the start (`released_through`) cannot serve
  them. With failOnDataLoss=true that fails the query, naming the pubend and the ticks; with false
  the end moves past them and the offset counts them (`lost`), so they are skipped once, counted
  once, and never silently.
- **Nothing to read** (`to_read`, `logged_after`): a durable tail follows the clock, so the tails
  move at every trigger while nothing is published. A pubend has something to read only if its
  newest logged event is above the start (and above the tick up to which nothing matched); the
  caller asks those brokers for a matching event, and ends the micro-batch at the start (no
  micro-batch) when none has one.
- **Partitions** split each pubend's ticks `(start, end]` into contiguous ranges, so executors
  read in parallel, each range from the broker that logged it. The ranges tile the micro-batch
  without overlap: each event is read by one task.

Pure functions: no Spark, no broker, no clock. (`Head`, a pubend as its broker reports it, is
overlay.py's.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidings.spark.offsets import Offset, OffsetError
from tidings.spark.overlay import Head
from tidings.spark.planning import ReadError, split_at_marks, split_ticks


@dataclass(frozen=True, slots=True)
class Loss:
    """Ticks `(after, through]` of `pubend` were released before the query read them."""

    pubend: str
    after: int
    through: int

    def __str__(self) -> str:
        return f"pubend {self.pubend}: ticks ({self.after}, {self.through}]"


@dataclass(frozen=True, slots=True)
class StreamRange:
    """The ticks `(after, end]` of `pubend` that one task reads from `address`."""

    pubend: str
    address: str
    after: int
    end: int


def find_losses(start: Offset, heads: Mapping[str, Head]) -> list[Loss]:
    """The released ranges above the start, one per pubend, in pubend order."""
    found = []
    for pubend in sorted(heads):
        position, released = start.position(pubend), heads[pubend].released_through
        if released > position:
            found.append(Loss(pubend, position, released))
    return found


def skip(start: Offset, losses: Sequence[Loss]) -> Offset:
    """`start` moved past `losses`, which it counts."""
    return start.moved({loss.pubend: loss.through for loss in losses}, len(losses),
                       sum(loss.through - loss.after for loss in losses))


def latest(start: Offset, heads: Mapping[str, Head], cap: Mapping[str, int] | None = None) -> Offset:
    """Every pubend at its tail, or at its tail in `cap` when there is one (AvailableNow: the
    pubends seen then, at their tails then)."""
    tails = {p: h.last_tick for p, h in heads.items()}
    if cap is not None:
        tails = {p: min(t, cap[p]) for p, t in tails.items() if p in cap}
    return start.moved(tails)


def admit(start: Offset, end: Offset, ticks: Mapping[str, Sequence[int]], complete: Mapping[str, bool],
          events_max: int) -> Offset:
    """`end` pulled back so that at most `events_max` events lie after `start`.

    `ticks[p]` are the ticks of pubend p's matching events in (start, end], ascending, the first
    `events_max` of them or fewer; `complete[p]` says they are all there are. Pubends absent from
    `ticks` stay at `start`.
    """
    assert events_max >= 1
    merged = sorted((t, p) for p, ts in ticks.items() for t in ts)
    if len(merged) <= events_max and all(complete.get(p, False) for p in ticks):
        return start.moved({p: end.position(p) for p in ticks})
    taken: dict[str, int] = {}
    for _tick, pubend in merged[:events_max]:
        taken[pubend] = taken.get(pubend, 0) + 1
    positions = {}
    for pubend, ts in ticks.items():
        count = taken.get(pubend, 0)
        if count < len(ts):
            positions[pubend] = ts[count] - 1  # just before its first event not taken
        elif complete.get(pubend, False):
            positions[pubend] = end.position(pubend)
        elif ts:
            positions[pubend] = ts[-1]  # more may follow its last tick seen
    return start.moved(positions)


def plan_ranges(start: Offset, end: Offset, addresses: Mapping[str, str], partitions: int,
                floor: Mapping[str, int] | None = None,
                marks: Mapping[str, tuple[int, ...]] | None = None) -> list[StreamRange]:
    """The ranges of the micro-batch (start, end]: each pubend's ticks split into at most
    `partitions` // (pubends that moved) ranges, at least one, cut at its log's tick `marks` where
    enough fall inside (planning.split_at_marks: a backlog read in one batch is shared out by
    bytes, not by ticks). `floor` raises a pubend's start (released ticks skipped); ReadError when a
    pubend that moved has no known broker."""
    assert partitions >= 1
    if end.default != start.default or not end.covers(start):
        raise OffsetError(f"the micro-batch ends before it starts: {start.to_json()} to {end.to_json()}")
    moved = [p for p in sorted(end.positions) if end.position(p) > start.position(p)]
    share = max(1, partitions // max(1, len(moved)))
    ranges = []
    for pubend in moved:
        after, stop = max(start.position(pubend), (floor or {}).get(pubend, 0)), end.position(pubend)
        if stop <= after:
            continue
        address = addresses.get(pubend)
        if address is None:
            raise ReadError(f"no broker of the overlay reports pubend {pubend}, whose ticks ({after}, {stop}] "
                            "this micro-batch reads: is its broker down?")
        split = split_at_marks(after, stop, share, (marks or {}).get(pubend, ())) or split_ticks(after, stop, share)
        ranges += [StreamRange(pubend, address, a, e) for a, e in split]
    return ranges


def to_read(start: Offset, end: Offset, heads: Mapping[str, Head], clear: Mapping[str, int],
            match_all: bool) -> tuple[list[str], list[str]]:
    """Which pubends may hold events of the micro-batch (start, end]: (those that surely do, those
    whose log must be asked), in pubend order. A pubend whose broker says its newest event is at or
    below the start (or below `clear`, the tick up to which the driver found nothing matching) has
    none; one whose newest event is inside surely has some when the read takes every channel
    (`match_all`)."""
    sure: list[str] = []
    ask: list[str] = []
    for pubend in sorted(heads):
        after = max(start.position(pubend), clear.get(pubend, 0))
        newest = heads[pubend].last_event
        if end.position(pubend) <= after or (newest is not None and newest <= after):
            continue
        (sure if match_all and newest is not None and newest <= end.position(pubend) else ask).append(pubend)
    return sure, ask


def logged_after(start: Offset, heads: Mapping[str, Head]) -> bool:
    """Whether any pubend logged events (matching or not) after the start: then only moving the
    offset lets the query's durable subscription release them."""
    return any(h.last_event is None or h.last_event > start.position(p) for p, h in heads.items())
