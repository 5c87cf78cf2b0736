"""Tick interval maps: a Gryphon stream's knowledge and curiosity, one value per tick, held as runs.

A stream (the paper's istream or ostream, §3.1) gives every tick of a pubend's stream time a
knowledge value and a curiosity value. Ticks are microseconds, so a stream spans trillions of them,
but its values come in long runs (`F*[D|F]*Q*` at a pubend), so a `TickMap` stores one entry per
run: `_ends[i]` is the last tick of run i and `_values[i]` its value; run i covers
(`_ends[i-1]`, `_ends[i]`] and the first run starts at tick 0. Every operation names a range the
way the log does, half-open on the left: (after, through], 0 <= after <= through <= TICK_MAX. Tick
0 is the origin of every stream; no range can name it.

Knowledge (`Knowledge`) follows the paper's lattice (§2.1): Q is no knowledge; accumulating a
knowledge message raises Q to D (data at that tick) or F (final: nothing needed there). The
paper's S (silence) and D* (data delivered everywhere it was needed) are folded into F, as its
implementation does. D falls to F only through an explicit `finalize`. L (lost) is the durable
issue's: ticks whose records the pubend released, which a subend reports as an explicit gap.
Curiosity (`Curiosity`) is N (neutral, the default), C (some downstream subend wants the tick) or
A (nothing downstream needs it: acked, or silence).

Invariants (`check()`): `_ends` strictly increasing from >= 0 to TICK_MAX, one value per run,
adjacent runs hold different values. Operations cost O(log n) to find a range plus O(k) in the k
runs it touches; replacing runs splices the lists, a memmove of the tail.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from collections.abc import Sequence
from typing import Generic, NamedTuple, TypeVar

from tidings.core.event import TICK_MAX

V = TypeVar("V")


class Knowledge(enum.IntEnum):
    """What a stream knows of a tick. S (silence) and D* (data no longer needed) are folded into F."""

    Q = 0  # unknown
    D = 1  # data was published at this tick
    F = 2  # final: no data needed at this tick (silence, filtered out, or delivered)
    L = 3  # lost: the pubend released the record; subends report a gap


class Curiosity(enum.IntEnum):
    """What downstream wants of a tick."""

    N = 0  # neutral: D may be sent, need not be re-sent
    C = 1  # curious: a downstream subend is waiting for this tick
    A = 2  # anti-curious: nothing downstream needs it (acked, or silence)


Range = tuple[int, int]  # (after, through]
Run = tuple[int, int, V]  # (after, through, value)

_Q, _D, _F, _L = Knowledge.Q, Knowledge.D, Knowledge.F, Knowledge.L
_N, _C, _A = Curiosity.N, Curiosity.C, Curiosity.A
_ONLY_Q, _ONLY_D = frozenset({_Q}), frozenset({_D})
_ONLY_N, _ONLY_C = frozenset({_N}), frozenset({_C})


def _check_range(after: int, through: int) -> None:
    if not 0 <= after <= through <= TICK_MAX:
        raise ValueError(f"a tick range (after, through] needs 0 <= after <= through <= {TICK_MAX}, "
                         f"got ({after}, {through}]")


class TickMap(Generic[V]):
    """An interval map from ticks 0..TICK_MAX to values, every tick `default` at first."""

    __slots__ = ("_ends", "_values")

    def __init__(self, default: V) -> None:
        self._ends: list[int] = [TICK_MAX]
        self._values: list[V] = [default]

    @property
    def run_count(self) -> int:
        """How many runs the map holds (its memory, for limits)."""
        return len(self._ends)

    def get(self, tick: int) -> V:
        """The value at `tick`."""
        if not 0 <= tick <= TICK_MAX:
            raise ValueError(f"a tick is between 0 and {TICK_MAX}, got {tick}")
        return self._values[bisect_left(self._ends, tick)]

    def runs(self, after: int, through: int) -> list[Run[V]]:
        """The (after, through, value) pieces covering exactly (after, through], in tick order,
        adjacent pieces holding different values; empty when after == through."""
        _check_range(after, through)
        if after == through:
            return []
        ends, values = self._ends, self._values
        i = bisect_left(ends, after + 1)
        j = bisect_left(ends, through, i)
        if i == j:
            return [(after, through, values[i])]
        out = [(after, ends[i], values[i])]
        out.extend((ends[k - 1], ends[k], values[k]) for k in range(i + 1, j))
        out.append((ends[j - 1], through, values[j]))
        return out

    def assign(self, after: int, through: int, value: V) -> None:
        """Every tick of (after, through] becomes `value`."""
        _check_range(after, through)
        if after < through:
            i = bisect_left(self._ends, after + 1)
            self._splice(i, bisect_left(self._ends, through, i), after, through, [through], [value])

    def assign_where(self, after: int, through: int, old: frozenset[V], new: V) -> list[Range]:
        """Every tick of (after, through] whose value is in `old` becomes `new`; returns the ranges
        that changed value (merged, in order; ticks already `new` are not changes)."""
        pieces = self.runs(after, through)
        changed: list[Range] = []
        if not any(value in old and value != new for _, _, value in pieces):
            return changed
        ends: list[int] = []
        values: list[V] = []
        for start, end, value in pieces:
            if value in old and value != new:
                if changed and changed[-1][1] == start:
                    changed[-1] = (changed[-1][0], end)
                else:
                    changed.append((start, end))
                _append(ends, values, end, new)
            else:
                _append(ends, values, end, value)
        i = bisect_left(self._ends, after + 1)
        self._splice(i, bisect_left(self._ends, through, i), after, through, ends, values)
        return changed

    def first(self, after: int, values: frozenset[V]) -> int | None:
        """The smallest tick > `after` whose value is in `values`, or None if there is none."""
        _check_range(after, after)
        if after == TICK_MAX:
            return None
        ends, vals = self._ends, self._values
        i = bisect_left(ends, after + 1)
        if vals[i] in values:
            return after + 1
        for k in range(i + 1, len(ends)):
            if vals[k] in values:
                return ends[k - 1] + 1
        return None

    def prefix_end(self, after: int, values: frozenset[V]) -> int:
        """The largest T >= `after` such that every tick of (after, T] has a value in `values`:
        `after` itself when tick after+1 does not, TICK_MAX when nothing after it leaves `values`."""
        _check_range(after, after)
        if after == TICK_MAX:
            return after
        ends, vals = self._ends, self._values
        i = bisect_left(ends, after + 1)
        end = after
        for k in range(i, len(ends)):
            if vals[k] not in values:
                break
            end = ends[k]
        return end

    def forget_through(self, tick: int) -> None:
        """Every tick <= `tick` takes the value at `tick`: one run, so a prefix that no longer
        matters (final and acked) costs nothing however it was built. What the prefix held is lost,
        so the caller picks `tick` at the end of a prefix it has settled."""
        if not 0 <= tick <= TICK_MAX:
            raise ValueError(f"a tick is between 0 and {TICK_MAX}, got {tick}")
        i = bisect_left(self._ends, tick)
        del self._ends[:i]
        del self._values[:i]

    def check(self) -> None:
        """Assert the representation invariants (the tests call it after every step)."""
        ends, values = self._ends, self._values
        assert len(ends) == len(values) >= 1, "one value per run, at least one run"
        assert ends[0] >= 0 and ends[-1] == TICK_MAX, "runs cover 0..TICK_MAX"
        for k in range(1, len(ends)):
            assert ends[k - 1] < ends[k], "run ends strictly increase"
            assert values[k - 1] != values[k], "adjacent runs are merged"

    def _splice(self, i: int, j: int, after: int, through: int, ends: list[int], values: list[V]) -> None:
        """Replace (after, through], which runs i..j cover, by the runs `ends`/`values` (which cover
        it exactly, last end == through, adjacent values different; both lists are consumed),
        merging with the neighbouring runs where they hold the same value."""
        all_ends, all_values = self._ends, self._values
        lo, hi = i, j + 1
        start = all_ends[i - 1] if i else -1
        if start < after:  # run i begins before the range: keep its head unless it merges
            if all_values[i] != values[0]:
                ends.insert(0, after)
                values.insert(0, all_values[i])
        elif i and all_values[i - 1] == values[0]:  # the previous run runs on into the range
            lo = i - 1
        if all_ends[j] > through:  # run j ends after the range: keep its tail
            if all_values[j] == values[-1]:
                ends[-1] = all_ends[j]
            else:
                ends.append(all_ends[j])
                values.append(all_values[j])
        elif j + 1 < len(all_ends) and all_values[j + 1] == values[-1]:  # the next run absorbs
            ends.pop()
            values.pop()
        all_ends[lo:hi] = ends
        all_values[lo:hi] = values


class Accumulated(NamedTuple):
    """What accumulating one knowledge message did.

    `changed`: the runs that rose from Q, with their new values, in order: what the stream may
    forward and deliver. `conflicts`: ticks offered as F where the stream holds a D not yet
    finalized; the D is kept (data is never dropped on an upstream's word), and only a faulty peer
    or a filter change upstream says this. `data_on_final`: ticks offered as D where the stream holds
    F or L, kept as they are; since S and D* are both F here, this is also what a retransmission
    crossing our own finalize looks like, so it is no proof of a fault by itself."""

    changed: list[Run[Knowledge]]
    conflicts: int
    data_on_final: int




class KnowledgeMap(TickMap[Knowledge]):
    """A stream's knowledge: Q everywhere at first; accumulation only raises it."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(_Q)

    def accumulate(self, after: int, through: int, data_ticks: Sequence[int]) -> Accumulated:
        """Accumulate a knowledge message: every tick of (after, through] is F except `data_ticks`
        (strictly increasing, inside the range), which are D. Q ticks take the offered value; D, F
        and L ticks keep theirs (see `Accumulated` for what the disagreements count)."""
        _check_range(after, through)
        offered, ends, values = _pattern(after, through, data_ticks)
        if after == through:
            return Accumulated(offered, 0, 0)
        all_ends = self._ends
        i = bisect_left(all_ends, after + 1)
        if all_ends[i] >= through and self._values[i] is _Q:  # the common case: news of unknown ticks
            self._splice(i, i, after, through, ends, values)
            return Accumulated(offered, 0, 0)
        ends = []
        values = []
        changed: list[Run[Knowledge]] = []
        conflicts = data_on_final = 0
        p = 0
        for start, end, value in self.runs(after, through):
            while offered[p][1] <= start:
                p += 1
            for k in range(p, len(offered)):
                offer_start, offer_end, offer = offered[k]
                if offer_start >= end:
                    break
                low, high = max(offer_start, start), min(offer_end, end)
                if value is _Q:
                    changed.append((low, high, offer))
                    _append(ends, values, high, offer)
                elif value is _D:
                    if offer is _F:
                        conflicts += high - low
                elif offer is _D:  # on F or L
                    data_on_final += high - low
            if value is not _Q:
                _append(ends, values, end, value)
        if changed:
            self._splice(i, bisect_left(all_ends, through, i), after, through, ends, values)
        return Accumulated(changed, conflicts, data_on_final)

    def finalize(self, after: int, through: int) -> list[Range]:
        """D ticks of (after, through] become F (their data is no longer needed downstream, the
        paper's D*); returns the ranges that changed."""
        return self.assign_where(after, through, _ONLY_D, _F)

    def sparsen(self, after: int, through: int, wanted: Sequence[Range]) -> list[Range]:
        """Q ticks of (after, through] become F except those in the `wanted` ranges (ordered,
        disjoint, inside it), which stay Q: a catchup that knows from the PFS which ticks it needs
        (durable paper §4.2). Other ticks keep their value. Returns the ranges that became F."""
        _check_range(after, through)
        pieces = self.runs(after, through)
        if not any(value is _Q for _, _, value in pieces):
            return []
        ends: list[int] = []
        values: list[Knowledge] = []
        silenced: list[Range] = []
        w = 0
        for start, end, value in pieces:
            if value is not _Q:
                _append(ends, values, end, value)
                continue
            previous = start
            while w < len(wanted) and wanted[w][1] <= start:  # (over runs that are not Q)
                w += 1
            while w < len(wanted) and wanted[w][0] < end:
                low, high = max(wanted[w][0], previous), min(wanted[w][1], end)
                if low > previous:
                    _append(ends, values, low, _F)
                    silenced.append((previous, low))
                _append(ends, values, high, _Q)
                previous = high
                if wanted[w][1] > end:
                    break  # the range goes on into the next run
                w += 1
            if end > previous:
                _append(ends, values, end, _F)
                silenced.append((previous, end))
        i = bisect_left(self._ends, after + 1)
        self._splice(i, bisect_left(self._ends, through, i), after, through, ends, values)
        return silenced

    def mark_lost(self, after: int, through: int) -> list[Range]:
        """Q ticks of (after, through] become L (the pubend released them before anyone here learnt
        them); D, F and L ticks keep their value, since a tick known here was not lost here. Returns
        the ranges that changed."""
        return self.assign_where(after, through, _ONLY_Q, _L)


def _pattern(after: int, through: int,
             data_ticks: Sequence[int]) -> tuple[list[Run[Knowledge]], list[int], list[Knowledge]]:
    """The runs `F*DF*D...F*` of a knowledge message over (after, through] with D at `data_ticks`,
    also as run ends and values (ready to splice); ValueError unless the data ticks are strictly
    increasing inside the range. A burst's ticks are consecutive: a run of D costs one comparison
    per tick, and a message that is one run of D is recognised without a loop."""
    runs: list[Run[Knowledge]] = []
    ends: list[int] = []
    values: list[Knowledge] = []
    previous = after
    n = len(data_ticks)
    if n and after < data_ticks[0] and data_ticks[-1] <= through and data_ticks[-1] - data_ticks[0] == n - 1 \
            and list(data_ticks) == list(range(data_ticks[0], data_ticks[-1] + 1)):
        run_from = data_ticks[0] - 1
        if run_from > after:
            runs.append((after, run_from, _F))
            ends.append(run_from)
            values.append(_F)
        runs.append((run_from, data_ticks[-1], _D))
        ends.append(data_ticks[-1])
        values.append(_D)
        previous = data_ticks[-1]
    else:
        run_from = -1  # where the D run being extended began (exclusive); -1: none
        for tick in data_ticks:
            if tick == previous + 1 and run_from >= 0:
                previous = tick
                continue
            if not previous < tick <= through:
                raise ValueError(f"data ticks are strictly increasing inside ({after}, {through}]")
            if run_from >= 0:
                runs.append((run_from, previous, _D))
                ends.append(previous)
                values.append(_D)
            if tick - 1 > previous:
                runs.append((previous, tick - 1, _F))
                ends.append(tick - 1)
                values.append(_F)
            run_from, previous = tick - 1, tick
        if previous > through:  # (a run's later ticks were only compared with the one before)
            raise ValueError(f"data ticks are strictly increasing inside ({after}, {through}]")
        if run_from >= 0:
            runs.append((run_from, previous, _D))
            ends.append(previous)
            values.append(_D)
    if through > previous:
        runs.append((previous, through, _F))
        ends.append(through)
        values.append(_F)
    return runs, ends, values


def _append(ends: list[int], values: list[V], end: int, value: V) -> None:
    """Append the run ending at `end`, or extend the last run when it holds the same value."""
    if values and values[-1] == value:
        ends[-1] = end
    else:
        ends.append(end)
        values.append(value)


class CuriosityMap(TickMap[Curiosity]):
    """A stream's curiosity: N everywhere at first. A is sticky: only forgetting the whole stream
    (a restart) takes it back, since "nothing downstream needs this tick" never stops being true."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(_N)

    def curious(self, after: int, through: int) -> list[Range]:
        """N ticks of (after, through] become C; returns the ranges that did, in order. Only those
        go upstream in a nack: a tick already C was asked for already (nack consolidation)."""
        return self.assign_where(after, through, _ONLY_N, _C)

    def forget_curiosity(self, after: int, through: int) -> list[Range]:
        """C ticks of (after, through] fall back to N, so that a repeated nack for them looks fresh
        (the paper forgets an istream's C ticks after the minimum nack repetition interval)."""
        return self.assign_where(after, through, _ONLY_C, _N)

    def anti(self, after: int, through: int) -> None:
        """Every tick of (after, through] becomes A (acked, or known to be silence)."""
        self.assign(after, through, _A)

    def ack_through(self, tick: int) -> None:
        """An ack: every tick <= `tick` is A (the paper's ack message, one timestamp per stream)."""
        self.assign(0, tick, _A)
