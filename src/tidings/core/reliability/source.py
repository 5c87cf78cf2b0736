"""The pubend's side of guaranteed delivery: one knowledge stream per tree it publishes on.

Theory of operation (Gryphon exactly-once §2.2, §3.2). The pubend's log is the only stable copy of
an event. Once a sync makes a run of ticks durable, the pubend knows everything about them: for
each tree, the ticks whose events belong on that tree are D and every other tick is F. For each tree
with events in the sync it sends one first-time knowledge message (after, through], `after` being
where its previous message on that tree ended, so silence costs nothing extra: it rides in the next
data message. First-time data goes straight to the tree's rendez-vous point once the root's ACKs
have told the pubend where it is (one stream edge, which nacks follow back); everything else, and
data while the root is unknown or after it said ROOT_MOVED, travels as a routed Scribe PUBLISH,
which finds the current root after any repair (and so teaches the pubend the new one).

Trees with recent data, or whose root has not acknowledged everything, get periodic silence up to
the current time (`silence_interval_ns`): doubt horizons downstream advance, and a broker that lost
the tail of the stream sees the gap and nacks it (this is the paper's pubend-driven liveness, AET:
a silence message plays the AckExpected role). A tree whose stream is fully acknowledged and idle
for `stream_idle_ns` is forgotten: an idle pubend costs nothing. A stream whose root reports that
durable subscriptions below have not released everything sent is kept, with its periodic
silence, so their brokers' acks keep reporting how far they released (release.py).

A tree whose root said it has no members (TREE_EMPTY) is sent, past "empty", only what its root
has not acknowledged, and only while it counts for release (source_streams.py `counts`: the pubend
knew it to have members, and it has been empty for less than `release_hold_ns`; that root may be a
stale one of a partition, or the broker below may be restarting). Any other tree said empty (a
prefix tree of the channel nobody subscribes to) is sent nothing, events or silence, and its stream
is dropped: no route per event to a tree nobody is on.

A tree that gets members again after a while without (its rendez-vous point says TREE_ACTIVE to
the publishers it told it was empty, or whose streams it had) is told at once that every tick
after the last event this pubend published on it is silence (`activated`): the brokers that
joined it wanting history (`--from`, a durable token) then see a gap before that point, nack it,
and get the history from the log, instead of never hearing of a pubend that stays idle.

After a restart the pubend does not know which trees it had sent on; it reads the log's recent
tail (`recovery_ns`) once, and treats every tree found there as active and unacknowledged, so
periodic silence makes any broker that lacks the last events before the crash nack them.

This class composes the machines of the pubend's side, each with its rules in one module:

- source_streams.py: the per-tree streams, the root's ACKs, Tr and Td, and the release holds
  (a new root, a tree that lost its members, a restart);
- nack_answers.py: nacks answered from the log, paced by each tree's retransmission window
  (retransmit_window.py);
- source_knowledge.py: the knowledge messages, the trees of records, each tree's last event;
- flow_window.py: first-time knowledge paced per tree by its root's ACKs (a window of credit), held
  meanwhile; no silence goes past a held message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tidings.core import defaults
from tidings.core.deadlines import Alarm
from tidings.core.effects import ReadLog
from tidings.core.inputs import LogState
from tidings.core.reliability.flow_window import DEFAULT_LIMITS, FlowLimits, FlowOutput, FlowWindows, ReadBack
from tidings.core.reliability.log_span import SpanError
from tidings.core.reliability.nack_answers import NackAnswers, ReadLimits
from tidings.core.reliability.source_knowledge import EventTails, KnowledgeWriter, PublishOnTree
from tidings.core.reliability.source_streams import SourceStreams
from tidings.core.synced import Synced, SyncedBatch
from tidings.core.units import MICROSECOND_NS


@dataclass(frozen=True, slots=True)
class SourceConfig:
    silence_interval_ns: int
    stream_idle_ns: int
    recovery_ns: int
    read_bytes_max: int
    reads_max: int  # log reads in flight answering nacks
    trees_max: int
    knowledge_bytes_max: int  # record bytes in one knowledge message
    release_hold_ns: int = defaults.RELEASE_HOLD_NS  # a new root's release point is trusted after this long
    retransmit_window_bytes: int = defaults.RETRANSMIT_WINDOW_BYTES  # a tree's nack answers sent beyond its root's ack
    # a window its root's acks have not moved this long starts again
    retransmit_wait_ns: int = defaults.RETRANSMIT_WAIT_NS
    flow: FlowLimits = DEFAULT_LIMITS  # first-time knowledge per tree (flow_window.py)


SourceEffect = PublishOnTree | ReadLog


class Source:
    """The pubend `pubend_id` at `address`; `trees_of(channel)` names the trees of a channel, and
    `empty(now, tree)` says whether the tree's root said it has no members (Scribe's TREE_EMPTY):
    a broker's source reads its node's memory of TREE_EMPTY (empty_trees.py `Suppressions.suppressed`,
    `ScribeAgent.said_empty`), which lapses after `empty_hold_ns`, without a call into the agent."""

    def __init__(self, pubend_id: str, address: str, config: SourceConfig, trees_of: Callable[[str], list[str]],
                 empty: Callable[[int, str], bool] = lambda now, tree: False,
                 congested: Callable[[str], bool] = lambda address: False, alarm: Alarm | None = None) -> None:
        self.pubend_id = pubend_id
        self.address = address
        self.config = config
        self._empty = empty
        self._writer = KnowledgeWriter(pubend_id, address, config.knowledge_bytes_max, trees_of)
        self._tails = EventTails(config.trees_max)
        self._streams = SourceStreams(config.trees_max, config.release_hold_ns, empty)
        self._answers = NackAnswers(ReadLimits(config.read_bytes_max, config.reads_max,
                                               config.retransmit_window_bytes, config.retransmit_wait_ns),
                                    self._writer, self._tails, congested)
        self.flow = FlowWindows(config.flow, alarm)  # first-time knowledge per tree, paced by the root's ACKs
        self._read_backs: dict[int, ReadBack] = {}  # reads of what a window spilled, by reader: what is left
        self.flow_records_read = 0  # records read back from the log for the windows' spills

    # ---- first-time knowledge ------------------------------------------------------------------

    def published(self, now: int, batches: Synced, synced: int) -> list[SourceEffect]:
        """The sync made every tick up to `synced` durable; `batches` hold its events, each for
        the trees of its channel (on one channel, every tree gets the sync's columns, whose
        bytes are counted once)."""
        out: list[SourceEffect] = []
        size = batches.size() if batches.channel is not None else None
        for tree, (ticks, records) in self._writer.by_tree(batches).items():
            quiet = self._tails.published(tree, ticks[-1])  # (quiet after what the tree had before)
            stream = self._streams.get(tree)
            empty = self._empty(now, tree)
            if empty and stream is not None and not self._streams.counts(now, stream, empty):
                self._drop(tree)  # nobody below to wait for or to send to
                stream = None
            owed = stream is not None and stream.owed
            if empty and not owed:  # no members: nobody to tell; a member that joins later
                if stream is not None:  # nacks what it wants from its start
                    stream.sent_through = synced
                continue
            if stream is None:  # its first message says the ticks since the tree's previous event are silence,
                # so a subscriber that starts a clock-skew allowance back need not nack them
                stream = self._streams.new(tree, min(quiet, ticks[0] - 1), now)
                if stream is None:
                    continue
            out += self._flowed(self.flow.offer(now, tree, self._writer.chunked_columns(
                tree, stream.sent_through, synced, ticks, records, retransmit=False, root=stream.root,
                past_empty=owed, size=size)))
            stream.sent_through = synced
            stream.data_ns = now
        return out

    def activated(self, now: int, tree: str, synced: int) -> list[SourceEffect]:
        """`tree` has members again: every tick after this pubend's last event on it is silence.
        A tree whose stream was dropped while it had no members gets one again, from that event
        on: its periodic silence keeps the root hearing of this pubend, so that when the tree
        loses its members and gets new ones again, its root tells this pubend so once more (a
        pubend that went quiet on the tree was forgotten by its root, and the new members never
        heard of its events until it published on the tree again)."""
        last = self._tails.last(tree)
        if last is None or self.flow.holding(tree):  # (held: the periodic silence after the hold tells it)
            return []
        renewed = self._streams.new(tree, last, now) if self._streams.get(tree) is None else None
        if synced <= last:  # nothing durable after it yet: the next periodic silence tells it
            return []
        if renewed is not None:
            renewed.sent_through = synced
        return [self._writer.send(tree, last, synced, [], retransmit=True)]

    def silence(self, now: int, synced: int) -> list[SourceEffect]:
        """Periodic silence up to `synced` on each tree with recent data or unacknowledged ticks;
        forgets idle, fully acknowledged trees."""
        out: list[SourceEffect] = []
        out += self._answers.resume_all(now)  # (the acks may have stopped altogether)
        idle = self.config.stream_idle_ns
        for tree, stream in self._streams.items():
            if not self._streams.counts(now, stream, self._empty(now, tree)):
                self._drop(tree)  # said empty, and nobody below to wait for: sent nothing
                continue
            recent = now - stream.data_ns < idle
            if not recent and stream.acked_through >= stream.sent_through <= stream.released_through:
                self._streams.forget(tree)
                self.flow.drop(tree)
                continue
            if synced > stream.sent_through and not self.flow.holding(tree):  # (held: silence would overtake it)
                out.append(self._writer.send(tree, stream.sent_through, synced, [], retransmit=False,
                                             past_empty=stream.owed))
                stream.sent_through = synced
        return out

    def acked(self, now: int, tree: str, through: int, root: str, released: int,
              delivered: int) -> list[SourceEffect]:
        """The rendez-vous point at `root` acknowledged the tree's stream through `through`; every
        durable subscription on the tree released it through `released`, and every subscriber that
        keeps up has it through `delivered`. Returns the reads the ack lets go on (the window)."""
        out: list[SourceEffect] = []
        out += self._answers.acked(now, tree, through)
        self._streams.acked(now, tree, through, root, released, delivered)
        out += self._flowed(self.flow.acked(now, tree, through))
        return out

    def flow_timeout(self, now: int) -> list[SourceEffect]:
        """Windows whose root's ACKs stopped for `flow_stall_ns` while holding: what they held goes."""
        return self._flowed(self.flow.handle_timeout(now))

    def _flowed(self, items: list[FlowOutput]) -> list[SourceEffect]:
        """What the flow windows let go: messages to the tree's root as the pubend knows it now (it
        may have moved while they waited), and reads of what they spilled."""
        out: list[SourceEffect] = []
        for item in items:
            if isinstance(item, ReadBack):
                out.append(self._read_back(item))
                continue
            stream = self._streams.get(item.tree)
            root = None if stream is None else stream.root
            out.append(item if item.root == root else replace(item, root=root))
        return out

    def _read_back(self, back: ReadBack) -> ReadLog:
        reader = self._answers.reader_id()
        self._read_backs[reader] = back
        # at most a window's worth of the log: what the tree gets of it goes at once, beyond the window
        return ReadLog(reader, back.after, back.through, min(self.config.read_bytes_max, self.config.flow.window_bytes))

    def _read_back_done(self, now: int, reader: int, records: list[tuple[int, bytes]],
                        log: LogState) -> list[SourceEffect]:
        """A read of a window's spill came back: the tree's records in it go as first-time
        knowledge (what the log released meanwhile as lost); the window reads on, or goes on."""
        back = self._read_backs.pop(reader)
        tree, after = back.tree, back.after
        stream = self._streams.get(tree)
        if stream is None or self.flow.window(tree) is None:  # dropped meanwhile: nobody to send to
            return []
        self.flow_records_read += len(records)
        through = records[-1][0] if records else back.through
        out: list[SourceEffect] = []
        released = min(log.released_through, through)
        if released > after:
            out.append(self._writer.send(tree, after, released, [], retransmit=False, root=stream.root, lost=True))
            after = released
        trees_of = self._writer.record_trees
        mine = [(tick, record) for tick, record in records if tick > after and tree in trees_of(record)]
        if through > after:
            out += self.flow.sent_back(tree, self._writer.chunked(tree, after, through, mine, retransmit=False,
                                                                  root=stream.root, past_empty=stream.owed))
        return out + self._flowed(self.flow.read_done(now, tree, through))  # (cut short: read on with room)

    def _drop(self, tree: str) -> None:
        self._streams.drop(tree)
        self.flow.drop(tree)

    # ---- release (source_streams.py) -------------------------------------------------------------

    def released(self, now: int, held: int | None) -> int:
        """Tr (SourceStreams.released)."""
        return self._streams.released(now, held)

    def delivered(self, now: int) -> int:
        """Td (SourceStreams.delivered)."""
        return self._streams.delivered(now)

    def held_trees(self) -> dict[str, int]:
        """The trees whose release is held, to save with the broker's durable state (`restore`)."""
        return self._streams.held_trees()

    def restore(self, now: int, held: dict[str, int], last_tick: int) -> None:
        """At start: the trees `held_trees` saved become streams again (SourceStreams.restore)."""
        self._streams.restore(now, held, last_tick)

    def unacknowledged(self, now: int) -> int:
        """Trees with members whose root has not yet acknowledged all the knowledge sent on them:
        a draining broker waits for none to be left, or its events would wait for its restart."""
        return self._streams.unacknowledged(now)

    def root_moved(self, tree: str, address: str) -> None:
        self._streams.root_moved(tree, address)

    @property
    def active_trees(self) -> int:
        return len(self._streams)

    # ---- nacks and the log (nack_answers.py) ---------------------------------------------------

    def nacked(self, now: int, tree: str, ranges: Sequence[tuple[int, int]], synced: int, log: LogState,
               asker: str | None = None) -> list[SourceEffect]:
        """Answer a nack of `tree` from the log (NackAnswers.nacked); straight to `asker` when it
        is the root this pubend knows for the tree (its ACKs said so), else routed."""
        stream = self._streams.get(tree)
        asker = asker if stream is not None and stream.root == asker else None
        return list(self._answers.nacked(now, tree, ranges, synced, log, asker))

    def recover(self, last_tick: int) -> list[SourceEffect]:
        """At start: read the log's recent tail to find the trees that may have undelivered events."""
        self._tails.recover(last_tick)
        if last_tick <= 0:
            return []
        after = max(0, last_tick - self.config.recovery_ns // MICROSECOND_NS)
        return list(self._answers.read(0, None, after, last_tick))

    def owns_read(self, reader: int) -> bool:
        return reader in self._read_backs or self._answers.owns_read(reader)

    def log_read(self, now: int, reader: int, records: list[tuple[int, bytes]], log: LogState,
                 span: tuple[int, bytes] | None = None) -> list[SourceEffect]:
        """A read of the log came back: records, or a span of the log's bytes (a nack's answer
        asks for one); a span that holds no valid records fails its read, as a corrupt segment does."""
        if reader in self._read_backs:
            return self._read_back_done(now, reader, records, log)
        if self._answers.take_recovery(reader):
            return self._recovered(now, records)
        try:
            return list(self._answers.log_read(now, reader, records, log, span))
        except SpanError:
            self._answers.read_failed(reader)  # the nack will be repeated
            return []

    def link_drained(self, now: int) -> list[SourceEffect]:
        """A peer link took what it held: reads that waited for it may go."""
        return list(self._answers.resume_all(now))

    def read_failed(self, now: int, reader: int) -> None:
        back = self._read_backs.pop(reader, None)
        if back is not None:
            self.flow.read_failed(now, back.tree)
            return
        self._answers.read_failed(reader)

    def _recovered(self, now: int, records: list[tuple[int, bytes]]) -> list[SourceEffect]:
        if not records:
            return []
        last = records[-1][0]
        for _, record in records:
            for tree in self._writer.record_trees(record):
                self._streams.recovered(now, tree, last)
        return []

    def record_trees(self, record: bytes) -> list[str]:
        """The trees of one of this pubend's own records (KnowledgeWriter.record_trees)."""
        return self._writer.record_trees(record)

    def status(self) -> dict[str, Any]:
        return {"trees": len(self._streams), "roots_known": self._streams.roots_known, **self._answers.status(),
                **self.flow.status(), "flow_records_read": self.flow_records_read}


__all__ = ["PublishOnTree", "Source", "SourceConfig", "SourceEffect", "Synced", "SyncedBatch"]
