"""What the pubend sends on its trees: knowledge messages, and where each tree's events end.

Theory of operation. Every message the pubend's side sends is knowledge of one tree's range
(after, through] (messages.py): its events there as D (with their logged records), every other
tick as F, or the whole range as L when the log released it. `KnowledgeWriter` makes them: a run
of records is cut into messages of at most `knowledge_bytes_max` of records (and RECORDS_MAX
records), each message's range ending at its last record but the last's, which ends where the run
does; each becomes a `PublishOnTree`, straight to the tree's root when the pubend knows it, else
routed. It also sorts records onto trees (`trees_of` names a channel's trees; a run of events on
one channel is looked up once; an own record's channel is read in place).

`EventTails` knows, for the trees this run of the pubend published on, the tick of each one's last
event, most recent trees last and at most `trees_max` of them. Past a tree's last event the log
holds nothing of it, so a nack there (a new subscriber's clock-skew allowance) is answered as
silence at once, and a tree's first stream says so too. Records up to `untracked_through` may be
on any tree: those logged before this run (`recover`) and those of a tree whose entry was evicted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from tidings.core.event import TICK_MAX, own_record_prefix, record_channel_bytes, record_routing_fields
from tidings.core.reliability.messages import RECORDS_PER_MESSAGE_MAX as RECORDS_MAX
from tidings.core.reliability.messages import KnowledgeMessage


@dataclass(frozen=True, slots=True)
class PublishOnTree:
    """Send `message` (from the pubend's broker at `origin`) to `tree`'s root: straight to `root`
    when the pubend knows it, else routed towards the tree's key. The message is written for the
    wire (`[origin, message.to_wire()]`, a Scribe event) by the reliability node, which sends it."""

    tree: str
    origin: str
    message: KnowledgeMessage
    root: str | None = None
    # sent even if the root said the tree is empty: someone below asked for it (a retransmission)
    # or has not acknowledged what it had (a root that said "empty" may be a stale one of a
    # partition, or have lost its members since)
    past_empty: bool = False


_FIRST, _SECOND = itemgetter(0), itemgetter(1)  # of (tick, record)
_TICK, _CHANNEL, _RECORD = itemgetter(0), itemgetter(1), itemgetter(3)  # of (tick, channel, attributes, record)


class KnowledgeWriter:
    """Knowledge messages of the pubend `pubend_id` at `address`, and the trees of its records."""

    def __init__(self, pubend_id: str, address: str, knowledge_bytes_max: int,
                 trees_of: Callable[[str], list[str]]) -> None:
        self.pubend_id = pubend_id
        self.address = address
        self._knowledge_bytes_max = knowledge_bytes_max
        self._trees_of = trees_of
        self._record_prefix = own_record_prefix(pubend_id)  # [pubend, ... of each own record

    def by_tree(self, deliveries: Sequence[tuple[int, str, Any, bytes]]) -> dict[str, list[tuple[int, bytes]]]:
        """Each tree's events; a run of events on one channel is looked up once. A sync's events
        on one channel (a publisher's usual PUBLISH) are sorted without a Python step per event."""
        channels = list(map(_CHANNEL, deliveries))
        if channels and channels.count(channels[0]) == len(channels):
            by_tree: dict[str, list[tuple[int, bytes]]] = {}
            self._extend(by_tree, channels[0], list(zip(map(_TICK, deliveries), map(_RECORD, deliveries), strict=True)))
            return by_tree
        by_tree = {}
        run: list[tuple[int, bytes]] = []
        run_channel = ""  # no channel is empty
        for tick, channel, _, record in deliveries:
            if channel != run_channel:
                self._extend(by_tree, run_channel, run)
                run, run_channel = [], channel
            run.append((tick, record))
        self._extend(by_tree, run_channel, run)
        return by_tree

    def _extend(self, by_tree: dict[str, list[tuple[int, bytes]]], channel: str, run: list[tuple[int, bytes]]) -> None:
        if not run:
            return
        for tree in self._trees_of(channel):
            if tree in by_tree:
                by_tree[tree] += run
            else:
                by_tree[tree] = run.copy()

    def record_trees(self, record: bytes) -> list[str]:
        """The trees of one of this pubend's own records. A nack's answer sorts thousands of them,
        so the usual layout (a tick past 2**32, a channel under 256 bytes) is read in place: the
        channel's bytes follow a fixed prefix (`trees_of` caches the trees of a channel)."""
        raw = record_channel_bytes(record, self._record_prefix)
        if raw is not None:
            return self._trees_of(raw.decode())
        fields = record_routing_fields(record)
        return [] if fields is None else self._trees_of(fields.channel)

    def chunked(self, tree: str, after: int, through: int, records: list[tuple[int, bytes]],
                retransmit: bool, root: str | None = None, past_empty: bool = False) -> list[PublishOnTree]:
        """Knowledge of (after, through] in messages of at most `knowledge_bytes_max` of records
        (and RECORDS_MAX records); each message's range ends at its last record but the last's."""
        if len(records) <= RECORDS_MAX and sum(map(len, map(_SECOND, records))) <= self._knowledge_bytes_max:
            return [self.send(tree, after, through, records, retransmit, root, past_empty)]  # (the usual)
        out: list[PublishOnTree] = []
        start = 0
        size = 0
        for i, (_, record) in enumerate(records):
            if i > start and (size + len(record) > self._knowledge_bytes_max or i - start >= RECORDS_MAX):
                last = records[i - 1][0]
                out.append(self.send(tree, after, last, records[start:i], retransmit, root, past_empty))
                after, start, size = last, i, 0
            size += len(record)
        out.append(self.send(tree, after, through, records[start:], retransmit, root, past_empty))
        return out

    def send(self, tree: str, after: int, through: int, records: list[tuple[int, bytes]],
             retransmit: bool, root: str | None = None, past_empty: bool = False, lost: bool = False) -> PublishOnTree:
        ticks, bodies = tuple(map(_FIRST, records)), tuple(map(_SECOND, records))
        message = KnowledgeMessage(tree, self.pubend_id, after, through, ticks, bodies, retransmit, lost=lost)
        return PublishOnTree(tree, self.address, message, root, past_empty or retransmit)


class EventTails:
    """Per tree, the tick of this pubend's last event on it (at most `trees_max` trees)."""

    def __init__(self, trees_max: int) -> None:
        self._trees_max = trees_max
        self._last_data: dict[str, int] = {}  # tree -> its last event's tick, most recent trees last
        # records up to here may be on any tree: logged before this run (`recover`), or of a tree
        # whose `_last_data` entry was evicted; past it, a tree's records end at its entry
        self._untracked_through = TICK_MAX

    def published(self, tree: str, tick: int) -> None:
        """`tree`'s last event is now at `tick`."""
        self._last_data.pop(tree, None)
        self._last_data[tree] = tick
        if len(self._last_data) > self._trees_max:
            oldest = next(iter(self._last_data))
            self._untracked_through = max(self._untracked_through, self._last_data.pop(oldest))

    def recover(self, last_tick: int) -> None:
        """At start: what the log holds up to `last_tick` may be on any tree."""
        self._untracked_through = last_tick

    def last(self, tree: str) -> int | None:
        return self._last_data.get(tree)

    def quiet_after(self, tree: str) -> int:
        """The tick after which the log holds no record of `tree` (up to what was synced)."""
        return max(self._last_data.get(tree, 0), self._untracked_through)
