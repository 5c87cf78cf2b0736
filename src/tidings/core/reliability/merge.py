"""The total-order merge of one tree's streams for its total-order subscriptions.

Theory of operation (Gryphon exactly-once, §4: total order by a deterministic merge). Ticks of
different pubends are comparable (each pubend's ticks come from its clock, in microseconds), so a
subscription that wants total order is given the D ticks of all the tree's streams merged on
(tick, pubend). It can be given them only up to the *merge point*: the smallest doubt horizon of
the tree's streams (no stream can still bring a tick below it), and no later than the present less
the clock-skew allowance, so that a pubend not heard of yet cannot publish below it unless its
knowledge is late by more than that. The present is the broker's wall clock at its latest input
(`wall_us`); before any, the merge waits only for the streams.

A stream heard of only after the merge point passed its first ticks delivers them late: they are
counted in `late`, never dropped. Released ticks a subscription was not given are a `Lost` of their
own, before the records of the same merge.

The merge holds no timer: the reliability node runs it after a stream moved and on its silence
timer (the present moved). It keeps the machines' contract with no deadline.

Invariant: per subscription, the merge point delivered (`total[key]`) only grows.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidings.core.event import TICK_MAX
from tidings.core.reliability.effects import DeliverRecords, Lost
from tidings.core.reliability.istream import Istream

MergeEffect = DeliverRecords | Lost


class TotalOrderMerge:
    __slots__ = ("clock_skew_allowance_us", "late")

    def __init__(self, clock_skew_allowance_us: int) -> None:
        self.clock_skew_allowance_us = clock_skew_allowance_us
        self.late = 0  # records delivered at or below a merge point already passed

    def merge(self, total: dict[int, int], istreams: Mapping[str, Istream], wall_us: int) -> list[MergeEffect]:
        """Give every total-order subscription in `total` (key -> the merge point delivered, which
        this advances) the D ticks of `istreams` up to the merge point, in (tick, pubend) order."""
        if not total or not istreams:
            return []
        present = wall_us - self.clock_skew_allowance_us if wall_us else TICK_MAX
        out: list[MergeEffect] = []
        for key, merged in total.items():
            streams = [(p, istreams[p], istreams[p].consumers.get(key)) for p in sorted(istreams)]
            bound = present
            for _, ist, consumer in streams:  # the merge point: every stream can supply up to it
                bound = min(bound, ist.horizon if consumer is None else ist.ready_through(consumer, bound))
            items: list[tuple[int, str, bytes]] = []
            for pubend, ist, consumer in streams:
                if consumer is None:
                    continue
                for piece in ist.pieces_for(consumer, bound):
                    if piece.lost:
                        out.append(Lost(ist.tree, (key,), pubend, piece.after, piece.through))
                    items += [(tick, pubend, r) for tick, r in zip(piece.ticks, piece.records, strict=True)]
            if not items:
                continue
            items.sort()
            self.late += sum(1 for tick, _, _ in items if tick <= merged)
            total[key] = max(merged, items[-1][0])
            out.append(DeliverRecords(next(iter(istreams.values())).tree, (key,), tuple(p for _, p, _ in items),
                               [r for _, _, r in items]))
        return out

    def next_deadline(self) -> int | None:
        return None

    def handle_timeout(self, now: int) -> list[MergeEffect]:
        return []


__all__ = ["MergeEffect", "TotalOrderMerge"]
