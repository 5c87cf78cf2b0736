"""A sync's events, as the local fan-out and the pubend's trees both take them.

Theory of operation. A sync makes a run of the pubend's batches durable (core/publish/pubend.py
`PendingBatch`), and the composer hands them to two readers: the fan-out to this broker's live
subscriptions (subscription/table.py `synced`) and the pubend's side of its trees
(reliability/source_knowledge.py `by_tree`). When every batch that logged events is on one channel
without attributes (`channel`: a publisher's usual PUBLISH, and every sync of test (a)), both want
the same thing: every event's tick and record in order, as two lists, and what they make of them
(an EVENTS frame per subscriber, knowledge messages per tree, the trees' flow windows) wants their
size in bytes. `Synced` builds the two lists (`columns`) once, on first use, for both readers,
where each used to build its own, and takes their size from the batches (`size`: each batch's
bytes, which the intake counted as it encoded the records), where each reader used to sum it.

Invariants: the lists `columns` returns are shared, read only: a reader that keeps or changes
events copies them (the knowledge messages keep tuples; the fan-out hands the whole list to the
frames, which copy its bytes). `size` is the bytes of those records exactly (an EVENTS frame's
length is written from it): a batch's `size` is its records' bytes (tests/unit/test_synced.py holds
the intake to it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol


class SyncedBatch(Protocol):
    """A batch of the pubend's events made durable (core/publish/pubend.py `PendingBatch`): on one
    channel without attributes (`channel`), or each event's (tick, channel, attributes, record)."""

    @property
    def channel(self) -> str | None: ...

    @property
    def deliveries(self) -> Sequence[tuple[int, str, Any, bytes]]: ...

    @property
    def size(self) -> int:
        """The bytes of its records (core/publish/intake.py: the Append's, `size` bytes of records)."""
        ...

    def columns(self) -> tuple[Iterable[int], Iterable[bytes]]:
        """Its events' ticks and records, in order."""
        ...

    def last_tick(self) -> int | None:
        """Its last event's tick; None when it logged nothing (duplicates only)."""
        ...


class Synced:
    """The batches one sync made durable, in order, with their one channel's columns built once."""

    __slots__ = ("_columns", "_size", "batches", "channel", "logged")

    def __init__(self, batches: Sequence[SyncedBatch]) -> None:
        self.batches = batches
        self.logged = False  # whether any batch logged events (one of duplicates only logs none)
        channel: str | None = None
        mixed = False
        for batch in batches:
            if batch.last_tick() is None:
                continue
            self.logged = True
            if batch.channel is None or (channel is not None and batch.channel != channel):
                mixed = True
            channel = batch.channel
        # the one channel, without attributes, of every event of the sync; None when they differ
        self.channel = None if mixed else channel
        self._columns: tuple[list[int], list[bytes]] | None = None
        self._size: int | None = None

    def columns(self) -> tuple[list[int], list[bytes]]:
        """Every event's tick and record, in order (of a sync on one `channel`); shared, read only."""
        if self._columns is None:
            assert self.channel is not None, "the columns of a sync on one channel"
            ticks: list[int] = []
            records: list[bytes] = []
            for batch in self.batches:  # (a batch held as its run gives its own two lists: no pass per event)
                batch_ticks, batch_records = batch.columns()
                ticks += batch_ticks
                records += batch_records
            self._columns = (ticks, records)
        return self._columns

    def size(self) -> int:
        """The bytes of the records `columns` gives: the batches' own counts (the intake's, of
        the records it logged: core/publish/intake.py `_append`), not a pass over the records."""
        if self._size is None:
            assert self.channel is not None, "the bytes of a sync on one channel"
            self._size = sum(batch.size for batch in self.batches)
        return self._size
