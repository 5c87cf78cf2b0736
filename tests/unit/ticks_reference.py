"""The tick maps' semantics spelled out one tick at a time, for the Hypothesis tests of
`tidings.core.reliability.ticks`.

Ticks run to 2**63-1, so no dict can hold them all; the tests draw every tick they name (range
ends, data ticks) from LOW (0..200) or HIGH (the last 201 ticks). The ticks between the two regions
are then always inside or outside a range together, so the reference keeps one value per tick of
LOW and HIGH plus one for the whole gap (a cell of many ticks), and counts it with its width.
"""

from __future__ import annotations

from typing import Any

from tidings.core.event import TICK_MAX
from tidings.core.reliability.ticks import Curiosity, Knowledge

LOW_MAX = 200
HIGH_MIN = TICK_MAX - 200
# cell i covers real ticks CELLS[i][0]..CELLS[i][1] inclusive
CELLS = [(t, t) for t in range(LOW_MAX + 1)] + [(LOW_MAX + 1, HIGH_MIN - 1)] + \
        [(t, t) for t in range(HIGH_MIN, TICK_MAX + 1)]
GAP = LOW_MAX + 1


def cell(tick: int) -> int:
    assert 0 <= tick <= LOW_MAX or HIGH_MIN <= tick <= TICK_MAX, "tests name ticks of LOW or HIGH only"
    return tick if tick <= LOW_MAX else GAP + 1 + (tick - HIGH_MIN)


def width(i: int) -> int:
    return CELLS[i][1] - CELLS[i][0] + 1


class ReferenceMap:
    def __init__(self, default: Any) -> None:
        self.values = [default] * len(CELLS)

    def cells(self, after: int, through: int) -> range:
        """The cells of (after, through]."""
        assert after <= through
        return range(cell(after) + 1, cell(through) + 1)

    def get(self, tick: int) -> Any:
        return self.values[cell(tick)]

    def runs(self, after: int, through: int) -> list[tuple[int, int, Any]]:
        return group([(i, self.values[i]) for i in self.cells(after, through)])

    def assign(self, after: int, through: int, value: Any) -> None:
        for i in self.cells(after, through):
            self.values[i] = value

    def assign_where(self, after: int, through: int, old: frozenset[Any], new: Any) -> list[tuple[int, int]]:
        changed = []
        for i in self.cells(after, through):
            if self.values[i] in old and self.values[i] != new:
                self.values[i] = new
                changed.append((i, None))
        return [(a, b) for a, b, _ in group(changed)]

    def first(self, after: int, values: frozenset[Any]) -> int | None:
        for i in range(cell(after) + 1, len(CELLS)):
            if self.values[i] in values:
                return max(CELLS[i][0], after + 1)
        return None

    def prefix_end(self, after: int, values: frozenset[Any]) -> int:
        end = after
        for i in range(cell(after) + 1, len(CELLS)):
            if self.values[i] not in values:
                break
            end = CELLS[i][1]
        return end

    def forget_through(self, tick: int) -> None:
        at = self.values[cell(tick)]
        for i in range(cell(tick) + 1):
            self.values[i] = at

    # knowledge

    def accumulate(self, after: int, through: int, data_ticks: list[int]) -> tuple[list[Any], int, int]:
        data = {cell(t) for t in data_ticks}
        changed, conflicts, data_on_final = [], 0, 0
        for i in self.cells(after, through):
            offered = Knowledge.D if i in data else Knowledge.F
            current = self.values[i]
            if current is Knowledge.Q:
                self.values[i] = offered
                changed.append((i, offered))
            elif current is Knowledge.D and offered is Knowledge.F:
                conflicts += width(i)
            elif current in (Knowledge.F, Knowledge.L) and offered is Knowledge.D:
                data_on_final += 1
        return group(changed), conflicts, data_on_final

    def finalize(self, after: int, through: int) -> list[tuple[int, int]]:
        return self.assign_where(after, through, frozenset({Knowledge.D}), Knowledge.F)

    def mark_lost(self, after: int, through: int) -> list[tuple[int, int]]:
        return self.assign_where(after, through, frozenset({Knowledge.Q}), Knowledge.L)

    def sparsen(self, after: int, through: int, wanted: list[tuple[int, int]]) -> list[tuple[int, int]]:
        keep = {i for lo, hi in wanted for i in self.cells(lo, hi)}
        silenced = []
        for i in self.cells(after, through):
            if self.values[i] is Knowledge.Q and i not in keep:
                self.values[i] = Knowledge.F
                silenced.append((i, None))
        return [(a, b) for a, b, _ in group(silenced)]

    # curiosity

    def curious(self, after: int, through: int) -> list[tuple[int, int]]:
        return self.assign_where(after, through, frozenset({Curiosity.N}), Curiosity.C)

    def forget_curiosity(self, after: int, through: int) -> list[tuple[int, int]]:
        return self.assign_where(after, through, frozenset({Curiosity.C}), Curiosity.N)

    def anti(self, after: int, through: int) -> None:
        self.assign(after, through, Curiosity.A)

    def ack_through(self, tick: int) -> None:
        self.assign(0, tick, Curiosity.A)


def group(cells: list[tuple[int, Any]]) -> list[tuple[int, int, Any]]:
    """(after, through, value) runs of consecutive cells holding equal values, in real ticks."""
    out: list[tuple[int, int, Any]] = []
    for i, value in cells:
        after, through = CELLS[i][0] - 1, CELLS[i][1]
        if out and out[-1][1] == after and out[-1][2] == value:
            out[-1] = (out[-1][0], through, value)
        else:
            out.append((after, through, value))
    return out
