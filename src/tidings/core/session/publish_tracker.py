"""Publish tracking: which PUBLISH frame an ACK or a refusal answers, and what each event became.

Theory of operation. The session numbers every event it publishes (core/session/client_session.py):
a PUBLISH frame carries the sequence number of its first event, and its events are `seq + i`. The
broker answers each frame with one ACK naming that first `seq`, with one tick per event (nil for a
refused one) and the indexes of the events an idempotent publish had logged before (duplicates).
A refused event is also named by an ERROR, before its frame's ACK (core/broker/refusals.py): by its
`seq`, or in a coalesced ERROR by inclusive ranges `seqs`; the tracker keeps the broker's reason
for each such event so that the ACK's nil becomes that reason, not a bare "rejected".

`sent(seq, count, key)` records a frame under the driver's `key` (what it resolves: a future, a
list of event ids); `acked(ack)` gives that key back with one result per event: a `PublishResult`,
a `DuplicateResult` (the original's pubend and tick), or the `BrokerError` that refused it. An ACK
for a frame not outstanding (answered already, or from a connection lost since) gives None. When
the connection is lost, `clear()` gives back every key: whether those events were logged is
unknown, and the driver says so to whoever waits.

Invariant: a refusal is kept only for a sequence number this tracker issued at or above the oldest
frame still outstanding, and is dropped when its frame is answered; memory is bounded by the frames
in flight.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Generic, NamedTuple, TypeVar

from tidings.core.errors import BrokerError
from tidings.core.wire import messages

K = TypeVar("K", bound=Hashable)

REJECTED = "rejected"  # the code of an event the ACK gives nil for without an ERROR naming it


class PublishResult(NamedTuple):
    """Where an event was logged: its pubend and tick."""

    pubend: str
    tick: int

    @property
    def duplicate(self) -> bool:
        """True when an idempotent publish was logged before (within the broker's dedup window)
        and this is the original's pubend and tick: nothing was logged this time."""
        return False


class DuplicateResult(PublishResult):
    """The PublishResult of an idempotent publish the broker had logged before: equal to the
    original's, with `duplicate` True."""

    __slots__ = ()

    @property
    def duplicate(self) -> bool:
        return True


Result = PublishResult | BrokerError


class PublishTracker(Generic[K]):
    __slots__ = ("_frames", "_next_seq", "_refusals")

    def __init__(self) -> None:
        self._frames: dict[int, tuple[int, K]] = {}  # first seq -> (event count, key), oldest first
        self._refusals: dict[int, BrokerError] = {}  # seq of a refused event -> why
        self._next_seq = 0  # one past the newest event sent

    def __len__(self) -> int:
        """Frames awaiting their ACK."""
        return len(self._frames)

    def __bool__(self) -> bool:
        return bool(self._frames)

    def sent(self, seq: int, count: int, key: K) -> None:
        """A PUBLISH frame of `count` events numbered from `seq` went out; `key` is what its answer resolves."""
        self._frames[seq] = (count, key)
        self._next_seq = max(self._next_seq, seq + count)

    def pending(self) -> list[K]:
        """The keys of the frames awaiting their ACK, oldest first."""
        return [key for _, key in self._frames.values()]

    def acked(self, ack: messages.Ack) -> tuple[K, list[Result]] | None:
        """The key of the frame `ack` answers and one result per tick it carries; None when no
        such frame is outstanding."""
        entry = self._frames.pop(ack.seq, None)
        if entry is None:
            return None
        count, key = entry
        pubend, seq = ack.pubend, ack.seq
        results: list[Result] = [PublishResult(pubend, tick) if tick is not None else self._refusal(seq + k)
                                 for k, tick in enumerate(ack.ticks)]
        for k in ack.duplicates:
            res = results[k] if 0 <= k < len(results) else None
            if isinstance(res, PublishResult):
                results[k] = DuplicateResult(*res)
        if self._refusals:
            for n in range(seq, seq + count):
                self._refusals.pop(n, None)
        return key, results

    def _refusal(self, seq: int) -> BrokerError:
        """Why event `seq` was refused: what an ERROR named, else a bare rejection."""
        refusal = self._refusals.pop(seq, None)
        return BrokerError("event rejected", REJECTED) if refusal is None else refusal

    def refused(self, context: dict[str, Any], error: BrokerError) -> None:
        """An ERROR naming refused events (its `seq`, or the inclusive ranges `seqs` of a coalesced
        one): each keeps `error` for its frame's ACK. Numbers this tracker did not issue, or of
        frames answered already, are ignored."""
        if not self._frames:
            return
        lo, hi = next(iter(self._frames)), self._next_seq
        ranges = context.get("seqs")
        if not isinstance(ranges, list):
            seq = context.get("seq")
            if type(seq) is int and lo <= seq < hi:
                self._refusals[seq] = error
            return
        for r in ranges:
            if type(r) is list and len(r) == 2 and type(r[0]) is int and type(r[1]) is int:
                for seq in range(max(r[0], lo), min(r[1] + 1, hi)):
                    self._refusals[seq] = error

    def clear(self) -> list[K]:
        """The connection is lost: every frame's key, oldest first; none is outstanding any more."""
        keys = self.pending()
        self._frames.clear()
        self._refusals.clear()
        return keys
