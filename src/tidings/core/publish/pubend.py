"""The pubend: where an event is logged once and gets its tick (Gryphon's publishing endpoint).

Ticks are the pubend's stream time: `tick = max(last_tick + 1, wall_us)`, so they are strictly
increasing, close to the wall clock in microseconds (comparable across pubends for total order),
and monotonic across restarts because `last_tick` is recovered from the log. A batch of records is
appended under a token; tokens are acknowledged in order when the runtime reports them synced, and
only then do their events become knowledge (the durable tail, `synced_tick`) that may be delivered.

Invariants: ticks issued > every tick in the log; `synced_tick` only grows; pending batches leave
in token order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from tidings.core.publish.batch import RecordRun, ack_run
from tidings.core.wire import messages

Delivery = tuple[int, str, dict[str, Any], bytes]  # tick, channel, attributes, record
_TICK, _RECORD = itemgetter(0), itemgetter(3)  # of a delivery


@dataclass(slots=True)
class PendingBatch:
    """A batch logged but not yet synced: who to acknowledge, and what to deliver once durable.

    Its events are held one of two ways. A batch on one channel without attributes (`channel`,
    core/publish/batch.py) holds the Append's own records in `records` (a `RecordRun`: its ticks
    and records as two lists), and no per-event tuple beside them (`deliveries` empty): the fan-out
    and the trees take those columns as they are. Any other holds each event's (tick, channel,
    attributes, record) in `deliveries`."""

    token: int
    conn: int
    seq: int
    ticks: list[int | None]
    deliveries: list[Delivery]
    size: int  # encoded bytes, counted against pending_sync_bytes_max
    duplicates: list[int] | None = None  # indexes answered with an earlier tick (core/publish/dedup.py)
    channel: str | None = None  # the one channel of every delivery, none with attributes (core/publish/batch.py)
    records: RecordRun | None = None  # with `channel`: the events as the Append's columns

    def columns(self) -> tuple[Iterable[int], Iterable[bytes]]:
        """Its events' ticks and records, in order: a run's own two lists (shared, read only), or
        read from the deliveries."""
        if self.records is not None:
            return self.records.ticks, self.records.records
        return map(_TICK, self.deliveries), map(_RECORD, self.deliveries)

    def last_tick(self) -> int | None:
        """Its last event's tick; None when it logged nothing (duplicates only)."""
        if self.records is not None:
            return self.records.ticks[-1] if self.records.ticks else None
        return self.deliveries[-1][0] if self.deliveries else None

    def ack(self, pubend: str) -> bytes:
        """Its ACK frame: of a run logged whole (no duplicates), packed from its first tick and
        count (batch.py `ack_run`); else from its ticks (messages.ack)."""
        if self.records is not None and self.records.ticks and not self.duplicates:
            return ack_run(self.seq, pubend, self.records.ticks[0], len(self.records.ticks))
        return messages.ack(self.seq, pubend, self.ticks, self.duplicates)

    def events(self) -> list[Delivery]:
        """Each event's (tick, channel, attributes, record), built for a one-channel batch."""
        if self.records is None:
            return self.deliveries
        assert self.channel is not None
        return [(tick, self.channel, {}, record) for tick, record in self.records]


class Pubend:
    __slots__ = ("_pending", "_token", "last_tick", "pending_bytes", "pubend_id", "synced_tick")

    def __init__(self, pubend_id: str, last_tick: int) -> None:
        self.pubend_id = pubend_id
        self.last_tick = last_tick
        self.synced_tick = last_tick
        self._token = 0
        self._pending: deque[PendingBatch] = deque()
        self.pending_bytes = 0  # encoded bytes of the batches not yet synced

    def first_tick(self, wall_us: int) -> int:
        """The first of the ticks `reserve` would give events published now (nothing reserved)."""
        return max(self.last_tick + 1, wall_us)

    def reserve(self, count: int, wall_us: int) -> int:
        """Ticks for `count` events published now: consecutive, from the returned first tick."""
        first = max(self.last_tick + 1, wall_us)
        self.last_tick = first + count - 1
        return first

    def log(self, conn: int, seq: int, ticks: list[int | None], deliveries: list[Delivery] | None, size: int,
            duplicates: list[int] | None = None, channel: str | None = None,
            records: Sequence[tuple[int, bytes]] | None = None) -> int:
        """Record a batch whose Append is about to be emitted; returns its token. `channel`: the
        batch's one channel when none of its events has attributes (a fan-out matches it once);
        then `records` (the Append's, a `RecordRun`) may stand for `deliveries` (None: PendingBatch)."""
        self._token += 1
        held: RecordRun | None = None
        if deliveries is None:
            assert channel is not None and isinstance(records, RecordRun), \
                "a batch held as records is on one channel, as the intake's run"
            assert not records or records.ticks[-1] - records.ticks[0] == len(records) - 1, \
                "a batch held as records has consecutive ticks"
            held = records
        self._pending.append(PendingBatch(self._token, conn, seq, ticks, deliveries or [], size, duplicates, channel,
                                          held))
        self.pending_bytes += size
        return self._token

    def wait(self, conn: int, seq: int, ticks: list[int | None], duplicates: list[int]) -> bool:
        """A batch that logs nothing but names ticks already issued (duplicates) is acknowledged
        with the newest batch waiting for the disk, whose sync covers them all; False when none
        waits (every tick issued is durable: acknowledge now)."""
        if not self._pending:
            return False
        self._pending.append(PendingBatch(self._token, conn, seq, ticks, [], 0, duplicates))
        return True

    def declare_silence(self, wall_us: int) -> None:
        """Nothing was published up to the present: with no batch waiting for the disk, every tick
        up to `wall_us` is silence, known as surely as the durable ones (later events get later
        ticks, since ticks follow the clock; a clock stepped backwards past this would break it)."""
        if not self._pending and wall_us > self.last_tick:
            self.last_tick = self.synced_tick = wall_us

    @property
    def pending_batches(self) -> int:
        return len(self._pending)

    def synced(self, token: int) -> list[PendingBatch]:
        """The batches made durable by a sync up to `token`, in order."""
        out: list[PendingBatch] = []
        pending = self._pending
        while pending and pending[0].token <= token:
            batch = pending.popleft()
            self.pending_bytes -= batch.size
            out.append(batch)
            tick = batch.last_tick()
            if tick is not None:
                assert tick > self.synced_tick
                self.synced_tick = tick
        return out
