"""Whether a read covers the whole overlay: the pubends it cannot read, and what then happens.

Theory of operation. A read of the overlay (a batch read, an AvailableNow run, a micro-batch) is
complete only if it reads every pubend that holds events in its range. The pubend directory
(core/broker/directory.py) lists every pubend, also those whose broker is down, with what its log held
when its broker last announced it: its newest event (`last_event_tick`), its oldest retained one
(`first_tick`) and its released prefix. overlay.survey() returns the pubends listed but not
reached (`Missing`); `unread` says which of their ticks in a read's range hold events by that view:

    (max(after, released_through, first_tick - 1), min(end, last_event_tick)]

A pubend with nothing there (no event in the range, or all of it released) costs the read
nothing: it is complete without it. One with something there makes the read incomplete, and
`check` decides: with failOnDataLoss=true (the default) the read fails naming the pubend and its
broker's address (PubendUnreachableError); with false it is skipped, with one warning line naming
it, and counted (`metrics`, for a stream's progress).

What a read cannot see: events a pubend logged after its broker's last announcement reached the
directory (at most `directory_announce_interval_ns`, 1 s, before a crash), while that broker is down. They
are above the tail the directory holds, so above the end of this read for that pubend: a later
read, once the broker is back, gets them.

Pure functions: no Spark, no broker, no clock. Log lines go to the logger `tidings.spark`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.core.event import TICK_MAX
from tidings.spark.overlay import Missing
from tidings.spark.planning import ReadError

logger = logging.getLogger("tidings.spark")


@dataclass(frozen=True, slots=True)
class Unread:
    """Ticks `(after, through]` of `pubend`, which hold events by the directory's last view of its
    log, cannot be read: its broker at `address` is `why`."""

    pubend: str
    address: str
    why: str
    after: int
    through: int
    records: int  # the events its log retained (all ticks) when last heard of

    def __str__(self) -> str:
        return (f"pubend {self.pubend} at {self.address} ({self.why}): ticks ({self.after}, {self.through}], "
                f"{self.records} events retained when last heard of")


class PubendUnreachableError(ReadError):
    """A pubend with events in the read's range cannot be read (its broker is down or gone)."""

    code = "pubend-unreachable"

    def __init__(self, what: str, unread: Sequence[Unread]) -> None:
        super().__init__(
            f"tidings {what}: {len(unread)} pubend(s) of the overlay hold events in its range but cannot be "
            f"read: {'; '.join(map(str, unread))}; retry when their brokers are back, or set "
            '.option("failOnDataLoss", "false") to read the others (docs/spark.md#the-pubend-directory)'
        )
        self.unread = tuple(unread)


def unread(missing: Missing, after: int, end: int | None) -> Unread | None:
    """What of `(after, end]` (end None: no bound) the directory says `missing` holds; None when nothing."""
    if missing.first_tick is None:
        return None
    low = max(after, missing.released_through, missing.first_tick - 1)
    high = min(TICK_MAX if end is None else end, missing.last_event_tick)
    if high <= low:
        return None
    return Unread(missing.pubend, missing.address, missing.why, low, high, missing.records)


def unread_all(missing: Mapping[str, Missing], after: Mapping[str, int] | int, end: int | None) -> list[Unread]:
    """`unread` of every missing pubend, in pubend order; `after` per pubend (absent: 0) or one for all."""
    out = []
    for pubend, m in sorted(missing.items()):
        start = after if isinstance(after, int) else after.get(pubend, 0)
        found = unread(m, start, end)
        if found is not None:
            out.append(found)
    return out


def check(what: str, found: Sequence[Unread], fail_on_data_loss: bool) -> list[Unread]:
    """Fail the read over `found` (failOnDataLoss=true), or warn once per pubend and return them."""
    if found and fail_on_data_loss:
        raise PubendUnreachableError(what, found)
    for i, u in enumerate(found, 1):
        logger.warning("tidings %s: skipping %s (failOnDataLoss=false); %d of %d pubend(s) skipped", what, u, i,
                       len(found))
    return list(found)


def metrics(found: Sequence[Unread]) -> dict[str, Any]:
    """The skipped pubends as progress metrics: how many, and each with its address, ticks and events."""
    return {"pubendsSkipped": len(found),
            "skipped": {u.pubend: {"address": u.address, "after": u.after, "through": u.through,
                                   "records": u.records, "why": u.why} for u in found}}
