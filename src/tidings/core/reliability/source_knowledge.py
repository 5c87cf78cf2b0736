"""What the pubend sends on its trees: knowledge messages, and where each tree's events end.

Theory of operation. Every message the pubend's side sends is knowledge of one tree's range
(after, through] (messages.py): its events there as D (with their logged records), every other
tick as F, or the whole range as L when the log released it. `KnowledgeWriter` makes them: a run
of records is cut into messages of at most `knowledge_bytes_max` of records (and RECORDS_MAX
records), each message's range ending at its last record but the last's, which ends where the run
does; each becomes a `PublishOnTree`, straight to the tree's root when the pubend knows it, else
routed. It also sorts records onto trees (`trees_of` names a channel's trees; a run of events on
one channel is looked up once; an own record's channel is read in place). A nack's answer read
as a span (log_span.py) is sorted a run at a time: a batch record whose events are all on one
channel (a PUBLISH's usual shape) is taken onto a tree or left whole, its payloads cut from the
span without a Python step per event.

`EventTails` knows, for the trees this run of the pubend published on, the tick of each one's last
event, most recent trees last and at most `trees_max` of them. Past a tree's last event the log
holds nothing of it, so a nack there (a new subscriber's clock-skew allowance) is answered as
silence at once, and a tree's first stream says so too. Records up to `untracked_through` may be
on any tree: those logged before this run (`recover`) and those of a tree whose entry was evicted.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate, count, repeat
from operator import add, itemgetter, sub

from tidings.core.event import TICK_MAX, own_record_prefix, record_channel_bytes, record_routing_fields
from tidings.core.reliability.messages import RECORDS_PER_MESSAGE_MAX as RECORDS_MAX
from tidings.core.reliability.messages import KnowledgeMessage
from tidings.core.synced import Synced


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
    # the bytes of the message's records when its writer knew them (`chunked_columns`), else None:
    # the flow window counts them (flow_window.py `record_bytes`) without summing them again
    records_bytes: int | None = None


_FIRST, _SECOND = itemgetter(0), itemgetter(1)  # of (tick, record)
Columns = tuple[list[int], list[bytes]]  # a tree's events: their ticks, and their records in the same order


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

    def by_tree(self, synced: Synced) -> dict[str, Columns]:
        """Each tree's events of a sync (`synced`'s batches), as columns (ticks, records); a run of
        events on one channel is looked up once. A batch on one channel (a publisher's usual
        PUBLISH) is taken whole, without a Python step per event, and when the sync's events are
        all on one channel every tree of it is given the sync's own two lists (`Synced.columns`,
        which the local fan-out reads too; read only: `chunked_columns` copies what it keeps)."""
        if synced.channel is not None:
            return dict.fromkeys(self._trees_of(synced.channel), synced.columns())
        runs: list[tuple[str, list[int], list[bytes]]] = []  # (channel, ticks, records), in tick order
        for batch in synced.batches:
            if batch.channel is not None:
                batch_ticks, batch_records = batch.columns()
                if runs and runs[-1][0] == batch.channel:
                    runs[-1][1].extend(batch_ticks)
                    runs[-1][2].extend(batch_records)
                else:
                    runs.append((batch.channel, list(batch_ticks), list(batch_records)))
                continue
            for tick, channel, _, record in batch.deliveries:
                if runs and runs[-1][0] == channel:
                    runs[-1][1].append(tick)
                    runs[-1][2].append(record)
                else:
                    runs.append((channel, [tick], [record]))
        if len(runs) == 1:
            channel, ticks, records = runs[0]
            return dict.fromkeys(self._trees_of(channel), (ticks, records))
        by_tree: dict[str, Columns] = {}
        for channel, ticks, records in runs:
            self._extend(by_tree, channel, ticks, records)
        return by_tree

    def _extend(self, by_tree: dict[str, Columns], channel: str, ticks: list[int], records: list[bytes]) -> None:
        if not ticks:
            return
        for tree in self._trees_of(channel):
            if tree in by_tree:
                tree_ticks, tree_records = by_tree[tree]
                tree_ticks += ticks
                tree_records += records
            else:
                by_tree[tree] = (ticks.copy(), records.copy())

    def record_trees(self, record: bytes) -> list[str]:
        """The trees of one of this pubend's own records. A nack's answer sorts thousands of them,
        so the usual layout (a tick past 2**32, a channel under 256 bytes) is read in place: the
        channel's bytes follow a fixed prefix (`trees_of` caches the trees of a channel)."""
        raw = record_channel_bytes(record, self._record_prefix)
        if raw is not None:
            return self._trees_of(raw.decode())
        fields = record_routing_fields(record)
        return [] if fields is None else self._trees_of(fields.channel)

    def span_events(self, tree: str, span: bytes, runs: list[tuple[int, list[int]]]) -> tuple[list[int], list[bytes]]:
        """The ticks and payloads of `tree`'s events in `runs` of `span` (log_span.payload_runs). A
        run whose events are all own records on one channel, in the usual layout, is looked up
        once and taken whole; any other event by event, as `record_trees` sorts it."""
        ticks: list[int] = []
        bodies: list[bytes] = []
        for first, offsets in runs:
            starts, stops = offsets[:-1], offsets[1:]
            channel = self._run_channel(span, starts, stops)
            if channel is not None:
                if tree in self._trees_of(channel):
                    ticks += range(first, first + len(starts))
                    bodies += map(span.__getitem__, map(slice, starts, stops))
                continue
            for tick, start, stop in zip(count(first), starts, stops, strict=False):
                body = span[start:stop]
                if tree in self.record_trees(body):
                    ticks.append(tick)
                    bodies.append(body)
        return ticks, bodies

    def _run_channel(self, span: bytes, starts: list[int], stops: list[int]) -> str | None:
        """The channel of every payload of a run (`span[start:stop]`), when each is an own record
        in the layout `record_channel_bytes` reads in place and all name the first one's channel
        (the same bytes up to the tick, and from the tick to the channel's end); else None."""
        first = span[starts[0]:stops[0]]
        raw = record_channel_bytes(first, self._record_prefix)
        if raw is None:
            return None
        tick_at = 1 + len(self._record_prefix)  # the tick's 0xCF, after the array header and the pubend
        field_at = tick_at + 9
        field_end = field_at + (1 if first[field_at] < 0xD9 else 2) + len(raw)  # fixstr or str8, the channel
        head, field = first[:tick_at + 1], first[field_at:field_end]
        if len(starts) > 1 and (
                min(map(sub, stops, starts)) < field_end
                or not all(map(span.startswith, repeat(head), starts))
                or not all(map(span.startswith, repeat(field), map(add, starts, repeat(field_at))))):
            return None
        return raw.decode()

    def chunked(self, tree: str, after: int, through: int, records: list[tuple[int, bytes]],
                retransmit: bool, root: str | None = None, past_empty: bool = False) -> list[PublishOnTree]:
        """Knowledge of (after, through] in messages of at most `knowledge_bytes_max` of records
        (and RECORDS_MAX records); each message's range ends at its last record but the last's."""
        return self.chunked_columns(tree, after, through, list(map(_FIRST, records)), list(map(_SECOND, records)),
                                    retransmit, root, past_empty)

    def chunked_columns(self, tree: str, after: int, through: int, ticks: Sequence[int], bodies: list[bytes],
                        retransmit: bool, root: str | None = None, past_empty: bool = False,
                        size: int | None = None) -> list[PublishOnTree]:
        """`chunked` of the records at `ticks` with payloads `bodies` (`size`: their bytes, when
        the caller knows them). A message holds at least one record, and no more than fit in
        `knowledge_bytes_max` and RECORDS_MAX; each one's end is found by bisection over the
        records' running sizes, a step per message, not per record. Each message carries its
        records' bytes (`PublishOnTree.records_bytes`), for the flow window."""
        records_count, bytes_max = len(bodies), self._knowledge_bytes_max
        if size is None:
            size = sum(map(len, bodies))
        if records_count <= RECORDS_MAX and size <= bytes_max:
            return [self._message(tree, after, through, tuple(ticks), tuple(bodies), retransmit, root, past_empty,
                                  records_bytes=size)]
        ends = list(accumulate(map(len, bodies)))
        out: list[PublishOnTree] = []
        start = base = 0
        while (stop := min(max(bisect_right(ends, base + bytes_max, start), start + 1),
                            start + RECORDS_MAX)) < records_count:
            last = ticks[stop - 1]
            out.append(self._message(tree, after, last, tuple(ticks[start:stop]), tuple(bodies[start:stop]),
                                     retransmit, root, past_empty, records_bytes=ends[stop - 1] - base))
            after, start, base = last, stop, ends[stop - 1]
        out.append(self._message(tree, after, through, tuple(ticks[start:]), tuple(bodies[start:]),
                                 retransmit, root, past_empty, records_bytes=size - base))
        return out

    def send(self, tree: str, after: int, through: int, records: list[tuple[int, bytes]],
             retransmit: bool, root: str | None = None, past_empty: bool = False, lost: bool = False) -> PublishOnTree:
        return self._message(tree, after, through, tuple(map(_FIRST, records)), tuple(map(_SECOND, records)),
                             retransmit, root, past_empty, lost)

    def _message(self, tree: str, after: int, through: int, ticks: tuple[int, ...], bodies: tuple[bytes, ...],
                 retransmit: bool, root: str | None = None, past_empty: bool = False,
                 lost: bool = False, records_bytes: int | None = None) -> PublishOnTree:
        message = KnowledgeMessage(tree, self.pubend_id, after, through, ticks, bodies, retransmit, lost=lost)
        return PublishOnTree(tree, self.address, message, root, past_empty or retransmit, records_bytes)


class EventTails:
    """Per tree, the tick of this pubend's last event on it (at most `trees_max` trees)."""

    def __init__(self, trees_max: int) -> None:
        self._trees_max = trees_max
        self._last_data: dict[str, int] = {}  # tree -> its last event's tick, most recent trees last
        # records up to here may be on any tree: logged before this run (`recover`), or of a tree
        # whose `_last_data` entry was evicted; past it, a tree's records end at its entry
        self._untracked_through = TICK_MAX

    def published(self, tree: str, tick: int) -> int:
        """`tree`'s last event is now at `tick`; what `quiet_after` said before it (one call on the
        sync's path, for each tree of its events)."""
        quiet = max(self._last_data.pop(tree, 0), self._untracked_through)
        self._last_data[tree] = tick
        if len(self._last_data) > self._trees_max:
            oldest = next(iter(self._last_data))
            self._untracked_through = max(self._untracked_through, self._last_data.pop(oldest))
        return quiet

    def recover(self, last_tick: int) -> None:
        """At start: what the log holds up to `last_tick` may be on any tree."""
        self._untracked_through = last_tick

    def last(self, tree: str) -> int | None:
        return self._last_data.get(tree)

    def quiet_after(self, tree: str) -> int:
        """The tick after which the log holds no record of `tree` (up to what was synced)."""
        return max(self._last_data.get(tree, 0), self._untracked_through)
