"""Checking each stage of the PLDB pipeline against what was published, trusting no broker.

Every stage's output is a stream of items `(lane, position)`: an event is `(pubend, tick)` (ticks
rise within a pubend, and there is no order across pubends), a recommendation `(site, window
start)`. `stream_faults` compares what a stage received, in the order it received it, with what it
should have: items lost, duplicated, unexpected, and reordered (an item whose position is below the
one before it in the same lane). All four are 0 when the stage saw each item exactly once, in order.
A stage that publishes in micro-batches is ordered by micro-batch instead (`batch_order_faults`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TypeVar

Lane = TypeVar("Lane")

FAULTS = ("lost", "duplicated", "reordered", "unexpected")


def stream_faults(got: Sequence[tuple[Lane, int]], want: Iterable[tuple[Lane, int]]) -> dict[str, int]:
    wanted, seen = set(want), set(got)
    last: dict[Lane, int] = {}
    reordered = 0
    for lane, position in got:
        if lane in last and position < last[lane]:
            reordered += 1
        last[lane] = position
    return {"lost": len(wanted - seen), "duplicated": len(got) - len(seen), "reordered": reordered,
            "unexpected": len(seen - wanted)}


def batch_order_faults(got: Sequence[tuple[Lane, int, int]]) -> int:
    """Items (lane, micro-batch, position) out of order: within a lane, a micro-batch below one
    before it, or a position at or below one of an earlier micro-batch. Items of one micro-batch
    may come in any order among themselves (Spark gives its rows no order)."""
    faults = 0
    batch: dict[Lane, int] = {}
    top_before: dict[Lane, int] = {}  # the highest position of the lane's earlier micro-batches
    top: dict[Lane, int] = {}  # ... and of its current one
    for lane, b, position in got:
        if lane in batch and b != batch[lane]:
            if b < batch[lane]:
                faults += 1
                continue
            top_before[lane] = top[lane]
        if lane in top_before and position <= top_before[lane]:
            faults += 1
        batch[lane] = b
        top[lane] = max(top.get(lane, position), position)
    return faults


def windows(reports: Iterable[tuple[str, int]], window_us: int) -> Counter[tuple[str, int]]:
    """Reports per (site, window start) for reports (site, tick): tumbling windows of `window_us`
    aligned to the Unix epoch, as Spark's `window` cuts them."""
    return Counter((site, tick - tick % window_us) for site, tick in reports)


def clean(faults: dict[str, int]) -> bool:
    return not any(faults[k] for k in FAULTS if k in faults)
