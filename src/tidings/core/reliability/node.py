"""Guaranteed delivery at one broker: the composer of its pubend's source and its tree streams.

Theory of operation (Gryphon exactly-once on Scribe trees). This broker's pubend logs its events
and sends them down the trees as knowledge streams (`Source`, source.py). Every broker keeps, per
tree, an input stream per pubend whose consumers are its children and its local subscriptions
(`TreeStreams`, tree_streams.py; istream.py). The machines of the reliability layer, each with
its rules and state in one file:

- tree_streams.py: the streams, their consumers, and the push of knowledge to children;
- local_consumers.py: the local subscriptions and the PFS consumer on the streams (`LocalConsumers`,
  composed with the tree streams, the one writer of a tree's local part);
- curiosity.py: when a stream nacks its gaps and repeats a nack (GCT, NRT, backoff, Karn);
- interest.py: per tree, the filter-summary epoch protocol (widen, narrow, doubt, re-send);
- merge.py: the total-order merge for total-order subscriptions;
- acks.py: acks consolidated, one ACK per upstream broker and input.

This class is the one entry the cluster member calls. It routes each input to its machine and each
effect out: peers' ACK, NACK, KNOWLEDGE, ROOT_MOVED, SUMMARY and MOVED by type; a NACK or ACK of a
stream this broker has no consumer for, of its own pubend, to the source, which answers nacks from
the log, paced by the root's ACKs; a message to itself (the root of its own pubend's trees) is
handled at once. It holds the silence timer (the pubend's silence, the release protocol's point,
and the total-order merges, which wait for the present to move) beside the streams' curiosity.

Scribe is reached only through typed effects (`SendToChild`, `PublishRouted`, `RememberPublisher`,
effects.py) and inputs (`tree_changed` with Scribe's `TreeShape`s); `join_extra` and
`forwarder_extra` give what a SUBSCRIBE of this broker carries (Scribe's typed `Join`).

The best-effort measurement mode (`best_effort`) lives here alone: every event to every child and
local subscription, nothing acknowledged, nacked, summarised or retransmitted.

Own events: a broker's own pubend's events reach its local subscriptions from its log (the
broker's own path), so no local consumer is attached to this broker's own pubend's streams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from tidings.core import defaults
from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.durable.constream import Catchup, Recorded
from tidings.core.durable.release import release_through
from tidings.core.effects import ReadLog, ReleaseLog
from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.inputs import LogState
from tidings.core.multicast.effects import TreeShape
from tidings.core.overlay.envelope import PeerSend, RouteTo
from tidings.core.overlay.node_id import NodeRef
from tidings.core.reliability import messages
from tidings.core.reliability.curiosity import SendNack
from tidings.core.reliability.effects import (
    DeliverRecords,
    Lost,
    MovedAway,
    PublishRouted,
    RememberPublisher,
    SendToChild,
    StreamEffect,
)
from tidings.core.reliability.flow_window import FlowLimits
from tidings.core.reliability.interest import Interest, SendSummary
from tidings.core.reliability.local_consumers import LocalConsumers
from tidings.core.reliability.source import PublishOnTree, Source, SourceConfig, SourceEffect, Synced, SyncedBatch
from tidings.core.reliability.tree import PFS_CONSUMER, Held, Tree
from tidings.core.reliability.tree_streams import TreeStreams
from tidings.core.units import ns_to_us
from tidings.core.wire.packable import Packable, WireArray


@dataclass(frozen=True, slots=True)
class ReliabilityConfig:
    gap_curiosity_ns: int  # GCT
    nack_repeat_ns_min: int  # NRT floor
    nack_repeat_ns_max: int  # NRT after backoff
    silence_interval_ns: int
    stream_idle_ns: int
    recovery_ns: int
    stream_cache_bytes_max: int
    nack_ranges_max: int
    nack_range_ticks_max: int
    knowledge_bytes_max: int
    clock_skew_allowance_us: int
    streams_max: int
    read_bytes_max: int
    reads_max: int
    trees_max: int
    best_effort: bool = False  # measurement only: forward and deliver what arrives, track nothing
    # a tree's filter summary to the parent; past it, "everything"
    summary_bytes_max: int = defaults.FILTER_SUMMARY_BYTES_MAX
    filtering: bool = True  # measurement only when False: summaries travel, children are sent everything
    release_keep_us: int = ns_to_us(defaults.RELEASE_KEEP_NS)  # released events stay in the log this long (release.py)
    # early release: older ticks go even if a durable subscriber is away
    max_retain_us: int = ns_to_us(defaults.MAX_RETAIN_NS)
    release_hold_ns: int = defaults.RELEASE_HOLD_NS  # a child that left holds release at its last value this long
    # a durable catchup fetches matching ticks this close as one range
    nack_merge_ticks: int = defaults.NACK_MERGE_TICKS
    nack_complete: bool = True  # complete nacks (messages.Nack.complete), to parents that understand them
    # a tree's nack answers in flight beyond its root's ack
    retransmit_window_bytes: int = defaults.RETRANSMIT_WINDOW_BYTES
    # a window its root's acks have not moved this long starts again
    retransmit_wait_ns: int = defaults.RETRANSMIT_WAIT_NS
    # flow control of the pubend's first-time knowledge per tree (flow_window.py)
    flow_window_bytes: int = defaults.FLOW_WINDOW_BYTES
    flow_hold_bytes_max: int = defaults.FLOW_HOLD_BYTES_MAX
    flow_stall_ns: int = defaults.FLOW_STALL_NS


class SilenceTimer(NamedTuple):
    pass


SILENCE = SilenceTimer()

PubendState = Callable[[], tuple[int, LogState]]  # the durable tail and the log, for nacks
ToldEmpty = Callable[[int, str], bool]  # the rendez-vous point of a tree said it has no members (the source's)
NodeEffect = (PeerSend | DeliverRecords | Lost | Recorded | MovedAway | SendToChild | PublishRouted | RememberPublisher
              | ReleaseLog | ReadLog)


class ReliabilityNode:
    def __init__(self, me: NodeRef, pubend_id: str, config: ReliabilityConfig, told_empty: ToldEmpty,
                 trees_of: Callable[[str], list[str]], pubend_state: PubendState,
                 held: Held = lambda tree, pubend: None,
                 congested: Callable[[str], bool] = lambda address: False, alarm: Alarm | None = None,
                 takes_complete: Callable[[str], bool] = lambda address: True) -> None:
        """`alarm`: the broker's earliest deadline, told when a timer moves (core/deadlines.py);
        `takes_complete`: the broker at an address understands a complete nack (its peer link's
        version, wire/peer.py; a broker without peer links has no older peers)."""
        self.me = me
        self.pubend_id = pubend_id
        self.config = config
        self._pubend_state = pubend_state
        self._held = held
        self.release_asked = 0  # the log was last asked to release through this tick
        self.released = self.delivered = 0  # this pubend's Tr and Td when last computed (release.py)
        self.source = Source(pubend_id, me.address, SourceConfig(
            config.silence_interval_ns, config.stream_idle_ns, config.recovery_ns, config.read_bytes_max,
            config.reads_max, config.trees_max, config.knowledge_bytes_max, config.release_hold_ns,
            config.retransmit_window_bytes, config.retransmit_wait_ns,
            FlowLimits(config.flow_window_bytes, config.flow_hold_bytes_max, config.flow_stall_ns)), trees_of,
            told_empty, congested, alarm)
        self.streams = TreeStreams(me, pubend_id, config, held, congested, alarm, takes_complete)
        self.timers: Deadlines[SilenceTimer] = Deadlines(alarm)  # the pubend's silence, release and the merges
        self.peer_errors = 0
        self.locals = LocalConsumers(self.streams)  # local subscriptions and the PFS on the streams

    @property
    def wall_us(self) -> int:
        """The broker's clock at the latest input that had one (the merge point, epochs, release)."""
        return self.streams.wall_us

    @wall_us.setter
    def wall_us(self, value: int) -> None:
        self.streams.wall_us = value

    @property
    def trees(self) -> dict[str, Tree]:
        return self.streams.trees

    # ---- the pubend's side ---------------------------------------------------------------------

    def start(self, now: int, last_tick: int, held_trees: dict[str, int] | None = None) -> list[NodeEffect]:
        """Start the pubend's side: `held_trees` are the trees whose release was held when the
        broker's durable state was last saved (`Source.held_trees`)."""
        self.timers.set(SILENCE, now + self.config.silence_interval_ns)
        self.source.restore(now, held_trees or {}, last_tick)
        return self._source(now, self.source.recover(last_tick))

    def published(self, now: int, batches: Synced, synced: int) -> list[NodeEffect]:
        """A sync made `batches` (core/publish/pubend.py PendingBatch) and every tick up to
        `synced` durable."""
        return self._source(now, self.source.published(now, batches, synced))

    def tree_activated(self, now: int, tree: str) -> list[NodeEffect]:
        """`tree` has members again: tell it of this pubend's stream (release of history to joiners
        that want it: Source.activated)."""
        synced, _ = self._pubend_state()
        return self._source(now, self.source.activated(now, tree, synced))

    def log_read(self, now: int, reader: int, records: list[tuple[int, bytes]], log: LogState,
                 span: tuple[int, bytes] | None = None) -> list[NodeEffect]:
        return self._source(now, self.source.log_read(now, reader, records, log, span))

    def _source(self, now: int, effects: list[SourceEffect]) -> list[NodeEffect]:
        out: list[NodeEffect] = []
        for eff in effects:
            if not isinstance(eff, PublishOnTree):
                out.append(eff)
            elif eff.root == self.me.address:  # the root of its own tree: the message as the pubend made it
                out += self._own_arrived(now, eff)
            elif eff.root is not None:
                out.append(PeerSend(eff.root, eff.message.to_wire()))
            else:
                out.append(PublishRouted(eff.tree, [eff.origin, eff.message.to_wire()], eff.past_empty))
        return out

    # ---- knowledge arriving on a tree; the trees' shape and membership ---------------------------------

    def event_arrived(self, now: int, tree: str, event: WireArray, sender: str) -> list[NodeEffect]:
        """Knowledge of one pubend came down `tree` from `sender` (ProtocolError if malformed)."""
        origin, knowledge = _decode_event(tree, event)
        return self._arrived(now, event, origin, knowledge, sender)

    def _own_arrived(self, now: int, eff: PublishOnTree) -> list[NodeEffect]:
        """This broker's pubend sent knowledge to a tree this broker is the root of: its message
        is taken as it was made, not written for the wire and decoded again (the pubend's own
        messages are well formed by construction, what the decode's checks would prove), so a
        single broker's own trees cost no per-event codec work; the wire form is made only for
        the best-effort mode, which forwards it as it came."""
        knowledge = eff.message
        event: WireArray = [eff.origin, knowledge.to_wire()] if self.config.best_effort else []
        return self._arrived(now, event, eff.origin, knowledge, self.me.address)

    def _arrived(self, now: int, event: WireArray, origin: str, knowledge: messages.KnowledgeMessage,
                 sender: str) -> list[NodeEffect]:
        """Knowledge of one pubend, decoded, came down its tree from `sender` (`event`: as it came,
        read by the best-effort mode alone)."""
        tree = knowledge.tree
        if self.config.best_effort:
            return self._best_effort(tree, event, knowledge)
        return self._flush(now, self._out(now, self.streams.arrived(now, tree, origin, knowledge, sender)))

    def _best_effort(self, tree: str, event: WireArray, knowledge: messages.KnowledgeMessage) -> list[NodeEffect]:
        """The comparison mode: every event to every child and to every local subscription of the
        tree; nothing is acknowledged, nacked or retransmitted."""
        out: list[NodeEffect] = [SendToChild(tree, child, event) for child in self.streams.children(tree)]
        t = self.streams.trees.get(tree)
        if t is not None and t.locals and knowledge.ticks and knowledge.pubend != self.pubend_id:
            out.append(DeliverRecords(tree, tuple(t.locals), (knowledge.pubend,) * len(knowledge.records),
                               list(knowledge.records)))
        return out

    def tree_changed(self, shape: TreeShape) -> None:
        """Scribe's word on a tree's shape here (presence, root, parent, children)."""
        self.streams.tree_changed(shape)

    def join_extra(self, tree: str) -> WireArray:
        return self.streams.join_extra(tree)

    def forwarder_extra(self, tree: str, child_extra: Packable) -> WireArray:
        return self.streams.forwarder_extra(tree, child_extra)

    def child_added(self, now: int, tree: str, child: str, extra: Packable) -> list[NodeEffect]:
        return self._flush(now, self._out(now, self.streams.child_added(now, tree, child, extra)))

    def interest(self, tree: str) -> Interest | None:
        return self.streams.interest(tree)

    # ---- local subscriptions and the PFS consumer (local_consumers.py) ---------------------------------

    def local_subscribe(self, now: int, key: int, tree: str, start: int, total: bool = False,
                        pattern: str = "#", filter_text: str = "",
                        positions: dict[str, int] | None = None) -> list[NodeEffect]:
        effects = self.locals.local_subscribe(now, key, tree, start, total, pattern, filter_text, positions)
        return self._flush(now, self._out(now, effects))

    def local_unsubscribe(self, now: int, key: int, tree: str) -> list[NodeEffect]:
        return self._flush(now, self._out(now, self.locals.local_unsubscribe(now, key, tree)))

    def record(self, now: int, tree: str, registration: int, pattern: str, filter_text: str) -> list[NodeEffect]:
        return self._flush(now, self._out(now, self.locals.record(now, tree, registration, pattern, filter_text)))

    def unrecord(self, now: int, tree: str, registration: int) -> list[NodeEffect]:
        return self._flush(now, self._out(now, self.locals.unrecord(now, tree, registration)))

    def await_pfs(self, now: int, span: Catchup) -> None:
        self.locals.await_pfs(now, span)

    def pfs_answered(self, now: int, span: Catchup, answer: Catchup | None) -> tuple[int, list[NodeEffect]]:
        silenced, effects = self.locals.pfs_answered(now, span, answer)
        return silenced, self._flush(now, self._out(now, effects))

    def local_flow(self, now: int, key: int, tree: str, blocked: bool) -> list[NodeEffect]:
        return self._flush(now, self._out(now, self.locals.local_flow(now, key, tree, blocked)))

    def delivered_through(self, key: int, tree: str) -> dict[str, int]:
        return self.locals.delivered_through(key, tree)

    def lag(self, key: int, tree: str) -> dict[str, int]:
        return self.locals.lag(key, tree)

    def link_drained(self, now: int, address: str) -> list[NodeEffect]:
        """The peer link to `address` took what it held: send that child what it was held back, and
        read on for the nacks answered to it."""
        out = self._source(now, self.source.link_drained(now))
        out += self._out(now, self.streams.link_drained(now, address))
        return self._flush(now, out)

    # ---- peers' messages ---------------------------------------------------------------------------

    def received(self, now: int, sender: str, message: Any) -> list[NodeEffect]:
        decoded = messages.decode(message)
        out: list[NodeEffect] = []
        if type(decoded) is messages.StreamAcks:
            out += self._acks_arrived(now, sender, decoded)
        elif type(decoded) is messages.Nack:
            out += self._nacked(now, sender, decoded)
        elif type(decoded) is messages.KnowledgeMessage:  # straight from a pubend that takes us for the root
            if self.streams.is_root(decoded.tree):
                out += self._arrived(now, [sender, message], sender, decoded, sender)
            else:
                out += self._to(now, sender, messages.RootMoved(decoded.tree).to_wire())
        elif type(decoded) is messages.RootMoved:
            self.source.root_moved(decoded.tree, sender)
        elif type(decoded) is messages.SummaryUpdate:
            out += self._out(now, self.streams.summary_received(now, sender, decoded))
        elif type(decoded) is messages.Moved and decoded.home == self.pubend_id:
            out.append(MovedAway(decoded.registration))
        elif type(decoded) is not messages.Moved:  # (a MOVED for another home is not this broker's)
            raise AssertionError(f"reliability: no route for the message {decoded!r}")
        return self._flush(now, out)

    def _acks_arrived(self, now: int, sender: str, acks: messages.StreamAcks) -> list[NodeEffect]:
        out: list[NodeEffect] = []
        for stream in acks.streams:
            if not self.streams.acked(now, sender, stream) and stream.pubend == self.pubend_id:
                out += self._source(now, self.source.acked(now, stream.tree, stream.through, sender,
                                                           stream.released, stream.delivered))
        return out

    def moved(self, home_address: str, home: str, registration: int) -> list[NodeEffect]:
        """Tell the broker at `home_address` that its durable subscription `registration` resumed here."""
        if home_address == self.me.address:
            return []
        return [PeerSend(home_address, messages.Moved(home, registration).to_wire())]

    def _nacked(self, now: int, sender: str, nack: messages.Nack) -> list[NodeEffect]:
        rewound = self.streams.nacked(now, sender, nack)
        if rewound is not None:
            return self._out(now, rewound)
        if nack.pubend == self.pubend_id:
            synced, log = self._pubend_state()
            return self._source(now, self.source.nacked(now, nack.tree, nack.ranges, synced, log, sender))
        return []

    # ---- timers --------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.timers.next_deadline(), self.streams.next_deadline(),
                                 self.source.flow.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None

    def handle_timeout(self, now: int) -> list[NodeEffect]:
        """The silence timer and the streams' curiosity, the one due earlier first (the streams on a
        tie); before both, the pubend's flow windows whose root's ACKs stopped (flow_window.py)."""
        gaps_at, silence_at = self.streams.next_deadline(), self.timers.next_deadline()
        gaps_first = gaps_at is not None and (silence_at is None or gaps_at <= silence_at)
        out = self._source(now, self.source.flow_timeout(now))
        out += self._out(now, self.streams.handle_timeout(now)) if gaps_first else []
        if self.timers.pop_due(now) and not self.config.best_effort:
            synced, _ = self._pubend_state()
            out += self._source(now, self.source.silence(now, synced))
            out += self._release(now, synced)
            self.timers.set(SILENCE, now + self.config.silence_interval_ns)
            out += self._out(now, self.streams.merge_all())  # the present moved: total-order merges may go on
        if not gaps_first:
            out += self._out(now, self.streams.handle_timeout(now))
        return self._flush(now, out)

    def _release(self, now: int, synced: int) -> list[NodeEffect]:
        """The pubend's log may release a longer prefix (release.py): ask the runtime to."""
        if not self.wall_us:
            return []
        config = self.config
        self.released = self.source.released(now, self._held(None, self.pubend_id))
        self.delivered = self.source.delivered(now)
        through = release_through(self.released, self.delivered, synced, self.wall_us, config.max_retain_us,
                                  config.release_keep_us)
        if through <= self.release_asked:
            return []
        self.release_asked = through
        return [ReleaseLog(through)]

    # ---- sending -------------------------------------------------------------------------------

    def _out(self, now: int, effects: list[StreamEffect]) -> list[NodeEffect]:
        """The streams' effects, their messages to peers sent (SUMMARY none in the best-effort mode)."""
        out: list[NodeEffect] = []
        for eff in effects:
            if isinstance(eff, SendNack):
                out += self._to(now, eff.address, eff.message.to_wire())
            elif isinstance(eff, SendSummary):
                if not self.config.best_effort:
                    out += self._to(now, eff.address, eff.message.to_wire())
            else:
                out.append(eff)
        return out

    def _flush(self, now: int, out: list[NodeEffect]) -> list[NodeEffect]:
        """`out` and then the acks gathered while producing it, one ACK per upstream broker. An ACK
        to this broker itself (the root of its own pubend's trees: one per event on a lone broker)
        is taken as made, as `_own_arrived` takes its knowledge, not written for the wire and
        decoded again."""
        acks, me = self.streams.acks, self.me.address
        while acks:
            for send in acks.drain():
                if send.address == me:
                    out += self._flush(now, self._acks_arrived(now, me, send.message))
                else:
                    out.append(PeerSend(send.address, send.message.to_wire()))
        return out

    def _to(self, now: int, address: str, message: WireArray) -> list[NodeEffect]:
        """A message to a peer; to this broker itself (its own pubend's root), handled at once."""
        if address != self.me.address:
            return [PeerSend(address, message)]
        return self.received(now, address, message)

    def status(self) -> dict[str, Any]:
        streams, curiosity = self.streams, self.streams.curiosity
        return {"streams": streams.streams, "peer_errors": self.peer_errors,
                "total_order_late": streams.total_order.late,
                "release_asked": self.release_asked, "released": self.released, "delivered": self.delivered,
                "records_unwanted": streams.records_unwanted,
                "nacks_sent": curiosity.nacks_sent,
                "nack_ticks_sent": curiosity.nack_ticks_sent,
                "retransmissions_sent": streams.retransmissions_sent,
                "complete_nack_ticks_silenced": streams.complete_nack_ticks_silenced,
                "cache_records_evicted": streams.cache_records_evicted, "source": self.source.status(),
                "istreams": streams.status()}


def _decode_event(tree: str, event: object) -> tuple[str, messages.KnowledgeMessage]:
    if type(event) is not list or len(event) != 2 or type(event[0]) is not str:
        raise ProtocolError(BAD_MESSAGE, "a tree event is [origin address, knowledge]")
    knowledge = messages.decode(event[1])
    if type(knowledge) is not messages.KnowledgeMessage or knowledge.tree != tree:
        raise ProtocolError(BAD_MESSAGE, "a tree event carries knowledge of its own tree")
    return event[0], knowledge


__all__ = ["PFS_CONSUMER", "DeliverRecords", "Held", "Lost", "MovedAway", "NodeEffect", "ReliabilityConfig",
           "ReliabilityNode", "RouteTo", "Synced", "SyncedBatch"]
