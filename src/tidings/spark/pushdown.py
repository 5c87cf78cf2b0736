"""Spark predicates pushed down into the batch read, where they make the brokers send less.

Theory of operation. With `spark.sql.python.filterPushdown.enabled` on, Spark (4.1 and later)
offers a Python data source the simple predicates of a query's WHERE clause on its top-level
columns, ANDed (pyspark.sql.datasource.Filter). The read takes those it can apply before the
events leave the brokers and narrows itself:

- `tick` compared with a number (`=`, `<`, `<=`, `>`, `>=`): the tick range, exactly;
- `time` compared with a timestamp: the tick range too (a tick is the event's time in
  microseconds); Spark evaluates these again, since a timestamp's zone is Spark's business;
- `channel = 'a/b/c'`: the read asks the brokers for that channel only (a channel the read's
  pattern does not match reads nothing);
- `pubend = 'p…'` or `pubend IN (…)`: only those pubends are read;
- `IS NOT NULL` on any column: always true, every column is NOT NULL.

Everything else (attributes are a map, and Spark offers no predicate on a map's values; LIKE on
the channel; OR) is handed back, and Spark evaluates it on the rows. Pure: no Spark session, no
broker.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass, replace

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from tidings.core.channels import pattern_matches, validate_pattern
from tidings.core.event import (
    TICK_MAX,  # a tick is a Spark long
    datetime_to_tick,
)

_Comparison = EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual


@dataclass(frozen=True, slots=True)
class Narrowing:
    """What pushed predicates leave of the read: inclusive tick bounds, one channel, some pubends."""

    start_tick: int | None = None
    end_tick: int | None = None
    channel: str | None = None  # read this channel instead of the pattern
    pubends: frozenset[str] | None = None  # read only these
    empty: bool = False  # the predicates contradict each other or the read's pattern

    def bounds(self, start_tick: int | None, end_tick: int | None) -> tuple[int | None, int | None]:
        """The read's own inclusive bounds intersected with these."""
        start = _max(start_tick, self.start_tick)
        end = _min(end_tick, self.end_tick)
        return start, end


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def narrow(filters: Iterable[Filter], pattern: str) -> tuple[Narrowing, list[Filter]]:
    """The narrowing the filters allow, and the filters Spark must still evaluate (the very
    objects it passed)."""
    result = Narrowing()
    remaining: list[Filter] = []
    for item in filters:
        taken, exact = _take(result, item, pattern)
        if taken is None or not exact:
            remaining.append(item)
        if taken is not None:
            result = taken
    return result, remaining


def _take(now: Narrowing, item: Filter, pattern: str) -> tuple[Narrowing | None, bool]:
    if isinstance(item, IsNotNull):
        return now, True
    if isinstance(item, _Comparison) and item.attribute in (("tick",), ("time",)):
        return _range(now, item)
    if isinstance(item, EqualTo) and item.attribute == ("channel",) and isinstance(item.value, str):
        return _channel(now, item.value, pattern), True
    if isinstance(item, EqualTo | In) and item.attribute == ("pubend",):
        return _pubends(now, (item.value,) if isinstance(item, EqualTo) else tuple(item.value))
    return None, False


def _range(now: Narrowing, item: _Comparison) -> tuple[Narrowing | None, bool]:
    """A comparison on `tick` (exact) or on an aware `time` (Spark checks it again)."""
    value = item.value
    if item.attribute == ("tick",):
        return (_ticks(now, item, value), True) if type(value) is int else (None, False)
    if isinstance(value, _dt.datetime) and value.tzinfo is not None:
        return _ticks(now, item, datetime_to_tick(value)), False
    return None, False


def _pubends(now: Narrowing, values: tuple[object, ...]) -> tuple[Narrowing | None, bool]:
    if not all(isinstance(v, str) for v in values):
        return None, False
    wanted = frozenset(str(v) for v in values)
    pubends = wanted if now.pubends is None else now.pubends & wanted
    return replace(now, pubends=pubends, empty=now.empty or not pubends), True


def _ticks(now: Narrowing, item: _Comparison, tick: int) -> Narrowing:
    start, end = now.start_tick, now.end_tick
    if isinstance(item, EqualTo):
        start, end = _max(start, tick), _min(end, tick)
    elif isinstance(item, GreaterThan):
        start = _max(start, tick + 1)
    elif isinstance(item, GreaterThanOrEqual):
        start = _max(start, tick)
    elif isinstance(item, LessThan):
        end = _min(end, tick - 1)
    else:
        end = _min(end, tick)
    empty = (end is not None and end < 0) or (start is not None and start > TICK_MAX) or (
        start is not None and end is not None and start > end)
    start = None if start is None else min(max(start, 0), TICK_MAX)
    end = None if end is None else min(max(end, 0), TICK_MAX)
    return replace(now, start_tick=start, end_tick=end, empty=now.empty or empty)


def _channel(now: Narrowing, channel: str, pattern: str) -> Narrowing:
    try:
        valid = validate_pattern(channel) == channel and "+" not in channel.split("/") and "#" not in channel
    except ValueError:
        valid = False
    if not valid or not pattern_matches(pattern, channel) or now.channel not in (None, channel):
        return replace(now, empty=True)
    return replace(now, channel=channel)
