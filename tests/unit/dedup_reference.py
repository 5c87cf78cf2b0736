"""The dedup window's rule spelled out on a plain list, for the Hypothesis test of
`tidings.core.publish.dedup`: every keyed event logged, in tick order, and a horizon. A pair is a duplicate
when some record above the horizon holds it; an entry is a run of records where each follows the
one before with the same producer, the next pseq and the next tick."""

from __future__ import annotations


class ReferenceWindow:
    def __init__(self, window_us: int, entries_max: int, producers_max: int) -> None:
        self.window_us = window_us
        self.entries_max = entries_max
        self.producers_max = producers_max
        self.records: list[tuple[str, int, int]] = []  # (producer, pseq, tick), tick order
        self.horizon = 0

    def runs(self) -> list[list[tuple[str, int, int]]]:
        out: list[list[tuple[str, int, int]]] = []
        for rec in self.records:
            if out:
                p, s, t = out[-1][-1]
                if rec == (p, s + 1, t + 1):
                    out[-1].append(rec)
                    continue
            out.append([rec])
        return out

    def producers(self) -> set[str]:
        return {p for p, _, _ in self.records}

    def lookup(self, producer: str, pseq: int) -> int | None:
        for p, s, t in reversed(self.records):
            if (p, s) == (producer, pseq):
                return t
        return None

    def forget_through(self, tick: int) -> None:
        self.horizon = max(self.horizon, tick)
        self.records = [r for r in self.records if r[2] > self.horizon]

    def advance(self, now_us: int) -> None:
        self.forget_through(now_us - self.window_us)

    def remember(self, producer: str, pseq: int, tick: int) -> None:
        old = self.lookup(producer, pseq)
        if old is not None:
            self.forget_through(old)
        if producer not in self.producers():
            while len(self.producers()) >= self.producers_max:
                self.forget_through(self.runs()[0][-1][2])
        self.records.append((producer, pseq, tick))
        while len(self.runs()) > self.entries_max:
            self.forget_through(self.runs()[0][-1][2])
