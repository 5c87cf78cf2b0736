"""Guaranteed delivery at one broker: its pubend's source streams and its input streams per tree.

Theory of operation. The Scribe agent (with `forward_events` off) hands this machine every event
that reaches the broker on a tree (`EventArrived`): a knowledge message of one pubend, from the
broker's parent, or, at the rendez-vous point, from the pubend's broker. The machine keeps one
`Istream` per (tree, pubend) whose consumers are the broker's children in the tree and its local
subscriptions of that tree, and forwards per consumer what its stream lets it (istream.py): to a
child as a Scribe EVENT (`ScribeAgent.send_event`, which also keeps Scribe's liveness), to local
subscriptions as a `DeliverRecords` effect for the broker, which matches each record against each
subscription's pattern and filter.

Upstream, it sends ACK (consolidated per upstream broker within one input) and NACK (after the gap
curiosity threshold, repeated with backoff) to the parent, or from the root to the pubend's broker.
A NACK from a child rewinds that child's stream; one for this broker's own pubend goes to the
`Source`, which answers from the log, paced by the root's ACKs (source.py). A NACK is not repeated
while its answer keeps moving the doubt horizon (a long one arrives over seconds), and only the
first answer after it is a round-trip sample.

Flow control on the peer links: a child whose link is congested (`congested`, the link's send
buffer past its high-water mark: what it is given waits in a bounded queue, then is dropped) is
pushed nothing; its records wait in the stream's cache, and `link_drained` sends what it is owed.

Tree membership changes carry positions. A broker that joins a tree, or repairs its place in it,
puts in its SUBSCRIBE the horizon of each pubend it has heard of and a default for the others (the
oldest tick any of its consumers wants); the new parent attaches the child at those positions, so
whatever was in flight through a failed broker is sent again, or nacked upward when the parent has
not got it. A local subscription attaches at its start point.

Filtering (the paper's filtering brokers). Each broker keeps, per child of a tree, the filter
summary the child last sent (summary.py; a child that sent none is "everything") and sends the child
a D tick whose record the summary does not match as F: branches with no interest get silence, not
data. Knowledge to a child is stamped with the epoch of the summary it was filtered by. A broker's
own summary for a tree (its *interest*) merges its local subscriptions' patterns and filters and
its children's summaries; it goes to the parent in the SUBSCRIBE (join or repair) and in SUMMARY
whenever it changes. Narrowing is safe at once. Widening is not: ticks after the new interest's
start may already be F here, or in flight as F. So a widening broker (1) bumps its epoch and takes
F ticks only from knowledge stamped with it (D from anything), (2) turns its F ticks after the
widening's start back to Q (`Istream.doubt_after`), and (3) sends SUMMARY with that start; the
parent rewinds the child to it (as for a nack) and re-sends filtered by the wider summary, after
doing the same one level up unless its own knowledge after that point was already filtered by a
summary covering the new one (`valid_from`). The root takes everything from the pubend; a broker
that a repair made root doubts too what its old parent had filtered for it: for the consumers that
widened its interest, and for any that comes later with a position before theirs (`valid_from`); a
child's nack from before `valid_from` doubts likewise (its F ticks there are fetched again). A stale
stamp (a lost or reordered SUMMARY) makes the child send its SUMMARY again (at most once per GCT).

Own events: a broker's own pubend's events reach its local subscriptions from its log (the
broker's own path), so no local consumer is attached to this broker's own pubend's streams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tidings.core import defaults
from tidings.core.deadlines import Deadlines
from tidings.core.durable.constream import READ_WAIT_NS, Catchup, Recorded
from tidings.core.durable.release import release_through
from tidings.core.effects import ReleaseLog
from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.event import TICK_MAX, record_routing_fields
from tidings.core.inputs import LogState
from tidings.core.multicast.agent import ScribeAgent
from tidings.core.overlay.envelope import PeerSend, RouteTo
from tidings.core.overlay.node_id import NodeRef
from tidings.core.reliability import messages
from tidings.core.reliability.istream import Istream, StreamLimits
from tidings.core.reliability.round_trip import RoundTrip
from tidings.core.reliability.source import PublishOnTree, Source, SourceConfig, SourceEffect
from tidings.core.reliability.summary import EVERYTHING, Summary, covers, merge, of_subscription, whole_tree
from tidings.core.reliability.summary import decode as decode_summary
from tidings.core.reliability.summary import to_wire as summary_wire
from tidings.core.units import ns_to_us

PFS_CONSUMER = -1  # the consumer key of the PFS consumer on a recorded tree's streams (constream.py)
POSITIONS_PER_SUBSCRIBE_MAX = 4096  # pubend horizons a repairing child may name
ROUND_TRIPS_MAX = 4096  # upstream brokers whose nack round trips are remembered


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
    # a tree's nack answers in flight beyond its root's ack
    retransmit_window_bytes: int = defaults.RETRANSMIT_WINDOW_BYTES
    # a window its root's acks have not moved this long starts again
    retransmit_wait_ns: int = defaults.RETRANSMIT_WAIT_NS


@dataclass(frozen=True, slots=True)
class DeliverRecords:
    """Records of `tree` in delivery order for the local subscriptions `keys` (each gets those that
    match its pattern and filter): one pubend's in tick order, or for total-order subscriptions
    several pubends' merged on (tick, pubend). `pubends[i]` is the pubend of `records[i]`."""

    tree: str
    keys: tuple[int, ...]
    pubends: tuple[str, ...]
    records: list[bytes]


@dataclass(frozen=True, slots=True)
class Lost:
    """Ticks (after, through] of `pubend` were released before the local subscriptions `keys` were
    given them: events they wanted may be missing, and each is told so (a GAP), never skipped."""

    tree: str
    keys: tuple[int, ...]
    pubend: str
    after: int
    through: int


class GapTimer(NamedTuple):
    tree: str
    pubend: str


class SilenceTimer(NamedTuple):
    pass


SILENCE = SilenceTimer()
Timer = GapTimer | SilenceTimer


@dataclass(slots=True)
class _Tree:
    istreams: dict[str, Istream]
    defaults: dict[str, int | None]  # child address -> where it wants pubends it has not heard of
    # (None: from wherever the stream is when it first reaches this broker)
    locals: dict[int, int]  # local subscription key -> start
    total: dict[int, int]  # total-order subscriptions (also in locals) -> the merge point delivered
    interests: dict[int, Summary | None] = field(default_factory=dict)  # local subscription -> its summary
    # child address -> (epoch, summary) it asked for; a child absent here gets everything, unstamped
    children: dict[str, tuple[int, Summary | None]] = field(default_factory=dict)
    sent: Summary | None = EVERYTHING  # this broker's interest, as last told to its parent
    epoch: int = 0  # of `sent`: knowledge stamped otherwise gives D ticks only
    valid_from: int = 0  # knowledge after this tick came filtered by summaries covering `sent`
    # pubend -> F ticks after this were made Q again for a child's nack below `valid_from` (what came
    # since was filtered by `sent`, or is the pubend's own at the root): a repeated nack needs no new doubt
    redoubted: dict[str, int] = field(default_factory=dict)
    resent_ns: int | None = None  # when SUMMARY was last sent again after a stale stamp
    # where a durable local subscription wants the pubends it names, overriding its start for them
    # (its checkpoint token's vector, core/durable/checkpoint.py)
    positions: dict[int, dict[str, int]] = field(default_factory=dict)
    # durable registrations recorded in the PFS (connected or away) -> their summary, part of the interest
    recorded: dict[int, Summary | None] = field(default_factory=dict)

    def start_of(self, key: int, pubend: str, otherwise: int) -> int:
        return self.positions.get(key, {}).get(pubend, otherwise)

    def wants(self, key: int, pubend: str, own: str) -> bool:
        """Local subscription `key` consumes `pubend`'s stream: other pubends always; this broker's
        own only in total order (publisher order gets those from the log, at once)."""
        return pubend != own or key in self.total


PubendState = Callable[[], tuple[int, LogState]]  # the durable tail and the log, for nacks
# the smallest tick this broker's own durable subscriptions released of a pubend, on a tree (None:
# on any tree); None when none of them wants that pubend (release.py)
Held = Callable[[str | None, str], int | None]


@dataclass(frozen=True, slots=True)
class MovedAway:
    """The durable subscription this broker hosted as `registration` resumed on another broker."""

    registration: int


class ReliabilityNode:
    def __init__(self, me: NodeRef, pubend_id: str, config: ReliabilityConfig, scribe: ScribeAgent,
                 trees_of: Callable[[str], list[str]], pubend_state: PubendState,
                 held: Held = lambda tree, pubend: None,
                 congested: Callable[[str], bool] = lambda address: False) -> None:
        self.me = me
        self._congested = congested  # the peer link to this address is past its high-water mark
        self.pubend_id = pubend_id
        self.config = config
        self.scribe = scribe
        self._pubend_state = pubend_state
        self._held = held
        self.release_asked = 0  # the log was last asked to release through this tick
        self.released = self.delivered = 0  # this pubend's Tr and Td when last computed (release.py)
        self.source = Source(pubend_id, me.address, SourceConfig(
            config.silence_interval_ns, config.stream_idle_ns, config.recovery_ns, config.read_bytes_max,
            config.reads_max, config.trees_max, config.knowledge_bytes_max, config.release_hold_ns,
            config.retransmit_window_bytes, config.retransmit_wait_ns), trees_of,
            scribe.told_empty, congested)
        self._limits = StreamLimits(config.stream_cache_bytes_max, config.nack_ranges_max,
                                    config.nack_range_ticks_max, config.knowledge_bytes_max, config.nack_merge_ticks)
        self.trees: dict[str, _Tree] = {}
        self._streams = 0
        self.timers: Deadlines[Timer] = Deadlines()
        self._acks: dict[str, list[messages.StreamAck]] = {}
        self.nacks_sent = 0
        self.nack_ticks_sent = 0
        self.retransmissions_sent = 0
        self.peer_errors = 0
        self.total_order_late = 0
        self.records_unwanted = 0  # first-time data that reached this broker though nothing here or below wanted it
        self._round_trips: dict[str, RoundTrip] = {}  # upstream broker -> its nack round trips
        self.wall_us = 0  # the broker's clock at the latest input that had one (for the merge point)

    # ---- the pubend's side ---------------------------------------------------------------------

    def start(self, now: int, last_tick: int, held_trees: dict[str, int] | None = None) -> list[Any]:
        """Start the pubend's side: `held_trees` are the trees whose release was held when the
        broker's durable state was last saved (`Source.held_trees`)."""
        self.timers.set(SILENCE, now + self.config.silence_interval_ns)
        self.source.restore(now, held_trees or {}, last_tick)
        return self._source(now, self.source.recover(last_tick))

    def published(self, now: int, deliveries: list[tuple[int, str, Any, bytes]], synced: int) -> list[Any]:
        """A sync made `deliveries` (tick, channel, attributes, record) and every tick up to
        `synced` durable."""
        return self._source(now, self.source.published(now, deliveries, synced))

    def tree_activated(self, now: int, tree: str) -> list[Any]:
        """`tree` has members again: tell it of this pubend's stream (release of history to joiners
        that want it: Source.activated)."""
        synced, _ = self._pubend_state()
        return self._source(now, self.source.activated(tree, synced))

    def log_read(self, now: int, reader: int, records: list[tuple[int, bytes]], log: LogState) -> list[Any]:
        return self._source(now, self.source.log_read(now, reader, records, log))

    def _source(self, now: int, effects: list[SourceEffect]) -> list[Any]:
        out: list[Any] = []
        for eff in effects:
            if type(eff) is not PublishOnTree:
                out.append(eff)
            elif eff.root == self.me.address:
                out += self.event_arrived(now, eff.tree, eff.event, self.me.address)
            elif eff.root is not None:
                out.append(PeerSend(eff.root, eff.event[1]))
            else:
                out += self.scribe.publish(now, eff.tree, eff.event, even_if_empty=eff.past_empty)
        return out

    # ---- knowledge arriving on a tree -----------------------------------------------------------

    def event_arrived(self, now: int, tree: str, event: Any, sender: str) -> list[Any]:
        """Knowledge of one pubend came down `tree` from `sender` (ProtocolError if malformed)."""
        origin, knowledge = _decode_event(tree, event)
        if self.config.best_effort:
            return self._best_effort(now, tree, event, knowledge)
        upstream = sender  # the parent, or at the root the pubend's broker (the route's source)
        out: list[Any] = []
        t = self.trees.get(tree)
        ist = None if t is None else t.istreams.get(knowledge.pubend)
        if ist is None:
            ist = self._new_istream(tree, knowledge.pubend, knowledge.after)
            if ist is None:  # nobody here consumes it: acknowledge it so upstream is not held up
                held = self._held(tree, knowledge.pubend)  # (a disconnected durable subscription may hold release)
                through = knowledge.through
                self._ack(upstream, tree, knowledge.pubend, through, through if held is None else min(held, through),
                          through)
                return self._flush(now, out)
        ist.upstream = upstream
        ist.origin = origin
        ist.heard_ns = now
        t = self.trees[tree]
        out += self._sync_children(now, t, ist)
        if knowledge.lost:  # released at the pubend: L whatever the summary was
            moved = ist.lose(knowledge.after, knowledge.through)
        elif knowledge.epoch is None or knowledge.epoch == t.epoch:
            moved = ist.accumulate(knowledge.after, knowledge.through, knowledge.ticks, knowledge.records)
        else:  # filtered by a summary the parent should no longer hold: its F ticks prove nothing
            moved = False
            for tick, record in zip(knowledge.ticks, knowledge.records, strict=True):
                moved = ist.accumulate(tick - 1, tick, (tick,), (record,)) or moved
            out += self._summary_again(now, tree, t, upstream, knowledge.epoch)
        if knowledge.records and not knowledge.retransmit:
            self._count_unwanted(tree, t, knowledge.records)
        if moved:
            if ist.nack_ns is not None and (ist.moved_ns is None or ist.moved_ns < ist.nack_ns):
                # the first answer to a nack: a round-trip sample, and NRT from it (the rest of a
                # long answer arrives later, by how long it is, not by the round trip); none after
                # a repeated nack (Karn's rule: the answer may be to an earlier one, or come from a
                # pubend back from a crash; such a sample would hold NRT up for many rounds)
                ist.nack_interval_ns = self._round_trip(upstream, None if ist.nack_repeated else now - ist.nack_ns)
            ist.moved_ns = now
            out += self._push(now, t, ist)
        elif knowledge.through <= ist.acked_sent:  # our ack may have been lost
            self._ack(upstream, tree, ist.pubend, ist.acked_sent, max(0, ist.released_sent),
                      max(0, ist.released_sent, ist.delivered_sent))
        self._after_change(now, ist)
        return self._flush(now, out)

    def _best_effort(self, now: int, tree: str, event: Any, knowledge: messages.KnowledgeMessage) -> list[Any]:
        """The comparison mode: every event to every child and to every local subscription of the
        tree; nothing is acknowledged, nacked or retransmitted."""
        out: list[Any] = []
        for child in self.scribe.children(tree):
            out += self.scribe.send_event(now, tree, child, event)
        t = self.trees.get(tree)
        if t is not None and t.locals and knowledge.ticks and knowledge.pubend != self.pubend_id:
            out.append(DeliverRecords(tree, tuple(t.locals), (knowledge.pubend,) * len(knowledge.records),
                               list(knowledge.records)))
        return out

    def _new_istream(self, tree: str, pubend: str, after: int) -> Istream | None:
        t = self.trees.get(tree)
        if t is None:
            if not self.scribe.children(tree):
                return None
            t = self.trees[tree] = _Tree({}, {}, {}, {})
        positions = [_or(t.defaults.get(child), after) for child in self.scribe.children(tree)]
        positions += [t.start_of(key, pubend, start) for key, start in t.locals.items()
                      if t.wants(key, pubend, self.pubend_id)]
        if t.recorded and pubend != self.pubend_id:  # from where its durable registrations released it
            held = self._held(tree, pubend)
            positions.append(after if held is None else min(held, after))
        if not positions or self._streams >= self.config.streams_max:
            return None
        ist = t.istreams[pubend] = Istream(tree, pubend, min(positions), self._limits)
        self._streams += 1
        if t.recorded and pubend != self.pubend_id:  # the PFS then covers what they may come back for
            ist.attach(PFS_CONSUMER, ist.floor)
        for key, start in t.locals.items():
            if t.wants(key, pubend, self.pubend_id):
                ist.attach(key, t.start_of(key, pubend, start))
        return ist

    def _sync_children(self, now: int, t: _Tree, ist: Istream) -> list[Any]:
        """Consumers follow Scribe's children table: new children at their default (ChildAdded
        attached them to the streams there were then; this is a new stream), gone ones out (the
        tree's interest follows)."""
        children = self.scribe.children(ist.tree)
        added = [child for child in children if child not in ist.consumers]
        for child in added:  # on a stream just heard of: its knowledge is all from this message
            ist.attach(child, _or(t.defaults.get(child), ist.horizon))
        gone = [k for k in ist.consumers if type(k) is str and k not in children]
        for key in gone:
            ist.detach(key, now, self.config.release_hold_ns)
            t.defaults.pop(key, None)
            t.children.pop(key, None)
        if not added and not gone:
            return []
        return self._resummarize(now, ist.tree, t, {}, TICK_MAX)

    def _push(self, now: int, t: _Tree, ist: Istream) -> list[Any]:
        """Send every consumer what it can have now; local subscriptions in step are served as one."""
        out: list[Any] = []
        groups: dict[int, list[int]] = {}
        for key, consumer in ist.consumers.items():
            if type(key) is str:
                if self._congested(key):  # its link's queue is bounded: what it took now would be dropped and
                    continue              # nacked again; it is sent once the link drains (link_drained)
                epoch, summary = t.children.get(key, (None, EVERYTHING)) if self.config.filtering else (None, None)
                stamp = None if summary is None else epoch
                checked = None if whole_tree(summary, ist.tree) else summary
                for piece in ist.pieces_for(consumer, summary=checked):
                    wire = messages.knowledge_wire(ist.tree, ist.pubend, piece.after, piece.through, piece.ticks,
                                                   piece.records, False, stamp, piece.lost)
                    out += self.scribe.send_event(now, ist.tree, key, [ist.origin, wire])
            elif key == PFS_CONSUMER:
                out += [Recorded(ist.tree, ist.pubend, piece.after, piece.through, piece.ticks, piece.records,
                                 piece.lost) for piece in ist.pieces_for(consumer)]
            elif key not in t.total and not consumer.blocked and consumer.sent_through < ist.horizon:
                groups.setdefault(consumer.sent_through, []).append(key)  # type: ignore[arg-type]
        for keys in groups.values():
            lead = ist.consumers[keys[0]]
            pieces = ist.pieces_for(lead)
            for key in keys[1:]:
                ist.consumers[key].sent_through = lead.sent_through
            for piece in pieces:
                if piece.lost:
                    out.append(Lost(ist.tree, tuple(keys), ist.pubend, piece.after, piece.through))
                elif piece.ticks:
                    out.append(DeliverRecords(ist.tree, tuple(keys), (ist.pubend,) * len(piece.records), piece.records))
        return out + self._merge(t)

    def _merge(self, t: _Tree) -> list[Any]:
        """Total order: every total-order subscription of the tree is given the D ticks of all its
        streams up to the merge point, the smallest doubt horizon of the tree's streams (and no
        later than the present less the clock-skew allowance, so a pubend not heard of yet cannot
        publish below it unless its knowledge is late by more than that), in (tick, pubend) order.
        A stream heard of only after the merge point passed its first ticks delivers them late,
        counted in `total_order_late`: never dropped."""
        if not t.total or not t.istreams:
            return []
        present = self.wall_us - self.config.clock_skew_allowance_us if self.wall_us else TICK_MAX
        out: list[Any] = []
        for key, merged in t.total.items():
            streams = [(p, t.istreams[p], t.istreams[p].consumers.get(key)) for p in sorted(t.istreams)]
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
            self.total_order_late += sum(1 for tick, _, _ in items if tick <= merged)
            t.total[key] = max(merged, items[-1][0])
            out.append(DeliverRecords(next(iter(t.istreams.values())).tree, (key,), tuple(p for _, p, _ in items),
                               [r for _, _, r in items]))
        return out

    def _after_change(self, now: int, ist: Istream) -> None:
        """Acknowledge what all consumers have, with the release point below, and watch the gaps."""
        released, delivered = ist.release_points(now, self._held(ist.tree, ist.pubend))
        point = ist.ack_point()
        # a consumer went back (a catchup, a child's nack): its progress is acknowledged again, below
        # what was acknowledged before, so that the pubend can pace its answer (source.py)
        ist.point_sent = min(ist.point_sent, point)
        if ist.upstream is not None and (point > ist.point_sent or released != ist.released_sent
                                         or delivered != ist.delivered_sent):
            ist.acked_sent = max(point, ist.acked_sent)
            ist.point_sent = point
            ist.released_sent, ist.delivered_sent = released, delivered
            self._ack(ist.upstream, ist.tree, ist.pubend, point, released, delivered)
        ist.bound_cache()
        ist.bound_memory()
        key = GapTimer(ist.tree, ist.pubend)
        gaps = ist.gaps()
        if gaps:  # (a gap of ticks recalled is not in flight: nacked at once)
            self.timers.set_earliest(key, now if gaps[0][0] < ist.recalled else now + self.config.gap_curiosity_ns)
        else:
            self.timers.cancel(key)
            if ist.waiting:  # a catchup's PFS read that is never answered must not hold its nacks for ever
                self.timers.set(key, min(until for _, until in ist.waiting.values()))
            ist.nack_ns = ist.curious_ns = None
            ist.nack_repeated = False
            ist.nack_interval_ns = self._round_trip(ist.upstream)

    # ---- tree membership -----------------------------------------------------------------------

    def join_extra(self, tree: str) -> list[Any]:
        """What this broker's SUBSCRIBE to `tree` carries: [default, [[pubend, horizon], ...],
        [epoch, summary]], the default (None: "from now on") for the pubends it has not heard of,
        and its interest in the tree with its epoch (what the new parent filters by)."""
        t = self.trees.get(tree)
        if t is None:
            return [None, [], None]
        horizons = {p: ist.horizon for p, ist in t.istreams.items()}
        for named in t.positions.values():  # pubends a durable subscription wants from a position
            for p, tick in named.items():      # and this broker has not heard of yet
                if p not in t.istreams:
                    horizons[p] = min(tick, horizons.get(p, tick))
        positions = [[p, tick] for p, tick in list(horizons.items())[:POSITIONS_PER_SUBSCRIBE_MAX]]
        wanted = [w for w in [*t.locals.values(), *t.defaults.values()] if w is not None]
        interest = self._interest(tree, t)
        if interest != t.sent:  # (a root's is not kept up to date: nobody filters for it)
            t.sent = interest
            self._next_epoch(t)
        return [min(wanted) if wanted else None, positions, [t.epoch, summary_wire(t.sent)]]

    def forwarder_extra(self, tree: str, child_extra: Any) -> list[Any]:
        """The SUBSCRIBE of a broker that becomes a forwarder of `tree` for its first child: the
        child's positions (the lower where both name a pubend) and this broker's own interest (its
        epoch and summary: the child's would be stamped as this broker's own)."""
        default, positions, _ = _decode_extra(child_extra)
        mine = self.join_extra(tree)
        for pubend, horizon in mine[1]:
            positions[pubend] = min(horizon, positions.get(pubend, horizon))
        defaults = [d for d in (default, mine[0]) if d is not None]
        return [min(defaults) if defaults else None,
                [[p, h] for p, h in list(positions.items())[:POSITIONS_PER_SUBSCRIBE_MAX]], mine[2]]

    def child_added(self, now: int, tree: str, child: str, extra: Any) -> list[Any]:
        default, positions, asked = _decode_extra(extra)
        t = self.trees.get(tree)
        if t is None:
            t = self.trees[tree] = _Tree({}, {}, {}, {})
        t.defaults[child] = default
        if asked is None:
            t.children.pop(child, None)
        else:
            t.children[child] = asked
        attached = {pubend: ist.attach(child, positions.get(pubend, _or(default, ist.horizon))).sent_through
                    for pubend, ist in t.istreams.items()}
        out = self._resummarize(now, tree, t, attached, _or(default, TICK_MAX))
        for ist in t.istreams.values():
            out += self._push(now, t, ist)
            self._after_change(now, ist)
        return self._flush(now, out)

    # ---- filter summaries ---------------------------------------------------------------------

    def _interest(self, tree: str, t: _Tree, bytes_max: int | None = None) -> Summary | None:
        """What this broker's local subscriptions and children of `tree` want, merged (within
        `bytes_max`, the summary limit unless given)."""
        parts = [*t.interests.values(), *t.recorded.values(),
                 *(t.children.get(c, (0, EVERYTHING))[1] for c in self.scribe.children(tree))]
        return merge(parts, self.config.summary_bytes_max if bytes_max is None else bytes_max)

    def _count_unwanted(self, tree: str, t: _Tree, records: tuple[bytes, ...]) -> None:
        """The filtering's measure: first-time data records no subscription here or below matches
        (exactly: no size limit), counted in `records_unwanted` (not at the root)."""
        if self.scribe.is_root(tree):  # the root is sent everything by design
            return
        wanted = self._interest(tree, t, TICK_MAX)
        if wanted is None or whole_tree(wanted, tree):  # every record is wanted: no need to look at any
            return
        for record in records:
            fields = record_routing_fields(record)
            if fields is not None and not wanted.matches(fields.channel, fields.attributes):
                self.records_unwanted += 1

    def _resummarize(self, now: int, tree: str, t: _Tree, positions: dict[str, int], since: int) -> list[Any]:
        """The tree's interest may have changed; `positions` (per pubend, `since` for the others)
        are where consumers whose wants grew resume. A narrowing is told to the parent; a widening
        not covered by what this broker already holds doubts its F ticks after those positions and
        tells the parent to send from there again. The root has no parent to tell, and is sent
        everything, but doubts too when what it holds was filtered while it was a forwarder."""
        if self.config.best_effort:
            return []
        interest = self._interest(tree, t)
        wider = not covers(t.sent, interest) or min([*positions.values(), TICK_MAX]) < t.valid_from
        if self.scribe.is_root(tree):
            # the pubend sends the root everything, but a root that was a forwarder before (a repair
            # made it root) holds knowledge its old parent filtered by `t.sent`: for a wider
            # interest its F ticks after the new consumers' positions prove nothing, and are asked
            # of the pubend again; so for a consumer that comes later with an earlier position
            # (`valid_from`: a second child re-joining after the repair, sim seed 1025)
            if wider:
                self._doubt(t, positions, since)
                t.sent = interest  # and knowledge its old parent still stamps with the old epoch (a
                self._next_epoch(t)  # partition healing) is not believed: its F ticks prove nothing
            return []
        if interest == t.sent and not wider:
            return []
        t.sent = interest
        self._next_epoch(t)
        if not wider:
            return self._send_summary(now, tree, t, TICK_MAX)
        return self._send_summary(now, tree, t, min([since, *self._doubt(t, positions, since)]))

    @staticmethod
    def _doubt(t: _Tree, positions: dict[str, int], since: int) -> list[int]:
        """F ticks after the new consumers' positions (`since` for the other pubends) are Q again;
        what this broker holds after the highest of those points is good for its interest."""
        points = [positions.get(pubend, min(since, ist.horizon)) for pubend, ist in t.istreams.items()]
        for point, ist in zip(points, t.istreams.values(), strict=True):
            ist.doubt_after(point)
        t.valid_from = max(points, default=0)  # no knowledge here yet: all of it will be good
        t.redoubted.clear()
        return points

    def _next_epoch(self, t: _Tree) -> None:
        """Epochs increase, and start from the broker's clock (microseconds), so a SUMMARY from
        before a restart, arriving late, never names an epoch the restarted broker uses again."""
        t.epoch = max(t.epoch + 1, self.wall_us)

    def _send_summary(self, now: int, tree: str, t: _Tree, since: int) -> list[Any]:
        """SUMMARY to the parent: after a widening, `since` is the tick after which it must send
        again (TICK_MAX: nothing; pubends this broker has no stream of resume where they are)."""
        parent = self.scribe.parent(tree)
        if parent is None:  # joining: the SUBSCRIBE carries the interest
            return []
        return self._to(now, parent, messages.SummaryUpdate(tree, t.epoch, t.sent, since).to_wire())

    def _summary_again(self, now: int, tree: str, t: _Tree, upstream: str, stamp: int) -> list[Any]:
        """Knowledge came filtered by another epoch than ours: SUMMARY again (at most once per GCT)."""
        if t.resent_ns is not None and now - t.resent_ns < self.config.gap_curiosity_ns:
            return []
        t.resent_ns = now
        t.epoch = max(t.epoch, stamp + 1)  # past any epoch the parent holds
        since = min([TICK_MAX, *(ist.horizon for ist in t.istreams.values())])  # where our doubt starts
        return self._to(now, upstream, messages.SummaryUpdate(tree, t.epoch, t.sent, since).to_wire())

    def _summary_received(self, now: int, child: str, update: messages.SummaryUpdate) -> list[Any]:
        """A child's interest in a tree: filter by it from now on; after a widening, send the child
        everything after `since` again (once this broker's own knowledge is good for it)."""
        t = self.trees.get(update.tree)
        if t is None or child not in self.scribe.children(update.tree):
            return []
        held = t.children.get(child)
        if held is not None and update.epoch <= held[0]:
            return []  # stale, or a duplicate
        t.children[child] = (update.epoch, update.summary)
        positions: dict[str, int] = {}
        widened = not covers(EVERYTHING if held is None else held[1], update.summary)
        if widened:
            for pubend, ist in t.istreams.items():
                ist.rewind(child, update.since)
                consumer = ist.consumers.get(child)
                if consumer is not None:
                    positions[pubend] = consumer.sent_through
        out = self._resummarize(now, update.tree, t, positions, update.since if widened else TICK_MAX)
        for ist in t.istreams.values():
            out += self._push(now, t, ist)
            self._after_change(now, ist)
        return out

    # ---- local subscriptions --------------------------------------------------------------------

    def local_subscribe(self, now: int, key: int, tree: str, start: int, total: bool = False,
                        pattern: str = "#", filter_text: str = "",
                        positions: dict[str, int] | None = None) -> list[Any]:
        """A local subscription of `tree` wants other pubends' ticks after `start` (or after
        `positions[pubend]` for the pubends named: a durable subscription's checkpoint) that match
        `pattern` and `filter_text`; in total order (`total`) its own pubend's too, merged with the
        rest (see `_merge`)."""
        t = self.trees.get(tree)
        if t is None:
            t = self.trees[tree] = _Tree({}, {}, {}, {})
        t.locals[key] = start
        t.interests[key] = of_subscription(pattern, filter_text, self.config.summary_bytes_max)
        if positions:
            t.positions[key] = dict(positions)
        if total:
            t.total[key] = start
        wants_from = {pubend: t.start_of(key, pubend, start) for pubend in t.istreams}
        out = self._resummarize(now, tree, t, wants_from, min([start, *(positions or {}).values()]))
        for pubend, ist in t.istreams.items():
            if t.wants(key, pubend, self.pubend_id):
                ist.attach(key, t.start_of(key, pubend, start))
                out += self._push(now, t, ist)
                self._after_change(now, ist)
        return self._flush(now, out)

    def local_unsubscribe(self, now: int, key: int, tree: str) -> list[Any]:
        t = self.trees.get(tree)
        if t is None:
            return []
        t.locals.pop(key, None)
        t.total.pop(key, None)
        t.interests.pop(key, None)
        t.positions.pop(key, None)
        for ist in t.istreams.values():
            ist.detach(key)
            self._after_change(now, ist)
        out = self._resummarize(now, tree, t, {}, TICK_MAX)
        self._drop_if_unused(tree, t)
        return self._flush(now, out)

    # ---- the persistent filtering subsystem's consumer (constream.py) -------------------------------

    def record(self, now: int, tree: str, registration: int, pattern: str, filter_text: str) -> list[Any]:
        """Durable registration `registration` of `tree` is recorded in the PFS from now on: the
        tree's streams get the PFS consumer (from where they are), and its interest stays in the
        tree's while its subscriber is away."""
        t = self.trees.get(tree)
        if t is None:
            t = self.trees[tree] = _Tree({}, {}, {}, {})
        first = not t.recorded
        t.recorded[registration] = of_subscription(pattern, filter_text, self.config.summary_bytes_max)
        wants_from: dict[str, int] = {}
        if first:  # from where the local subscriptions are (the new durable one's start among them)
            for pubend, ist in t.istreams.items():
                if pubend != self.pubend_id:
                    start = min([ist.horizon, *(c.sent_through for k, c in ist.consumers.items() if type(k) is int)])
                    wants_from[pubend] = ist.attach(PFS_CONSUMER, start).sent_through
        out = self._resummarize(now, tree, t, wants_from, min(wants_from.values(), default=TICK_MAX))
        for ist in t.istreams.values():
            out += self._push(now, t, ist)
            self._after_change(now, ist)
        return self._flush(now, out)

    def unrecord(self, now: int, tree: str, registration: int) -> list[Any]:
        """Registration `registration` of `tree` ended: it is no longer recorded (nor of interest)."""
        t = self.trees.get(tree)
        if t is None or registration not in t.recorded:
            return []
        del t.recorded[registration]
        if not t.recorded:
            for ist in t.istreams.values():
                ist.detach(PFS_CONSUMER)
                self._after_change(now, ist)
        out = self._resummarize(now, tree, t, {}, TICK_MAX)
        self._drop_if_unused(tree, t)
        return self._flush(now, out)

    def await_pfs(self, now: int, span: Catchup) -> None:
        """The catchup `span.key` asked the PFS which ticks of `span` it needs: its stream nacks
        nothing up to `span.through` until the answer (`pfs_answered`), or READ_WAIT_NS."""
        ist = self._istream(span.tree, span.pubend)
        if ist is not None and span.key in ist.consumers:
            ist.waiting[span.key] = (span.through, now + READ_WAIT_NS)
            self.timers.set_earliest(GapTimer(span.tree, span.pubend), now + READ_WAIT_NS)

    def pfs_answered(self, now: int, span: Catchup, answer: Catchup | None) -> tuple[int, list[Any]]:
        """The PFS answered the catchup waiting on `span`: of its range it needs only the matched
        ticks (Istream.sparsen), or, with no `answer`, all of them. Returns how many ticks it no
        longer fetches, and the effects (its nacks go now)."""
        t = self.trees.get(span.tree)
        ist = None if t is None else t.istreams.get(span.pubend)
        if t is None or ist is None or ist.waiting.pop(span.key, None) is None:
            return 0, []
        silenced = 0 if answer is None else ist.sparsen(answer.key, answer.after, answer.through, answer.ticks)
        out = self._push(now, t, ist)
        self._after_change(now, ist)
        return silenced, self._flush(now, out)

    def link_drained(self, now: int, address: str) -> list[Any]:
        """The peer link to `address` took what it held: send that child what it was held back, and
        read on for the nacks answered to it."""
        out: list[Any] = self._source(now, self.source.link_drained(now))
        for t in self.trees.values():
            for ist in t.istreams.values():
                consumer = ist.consumers.get(address)
                if consumer is not None and consumer.sent_through < ist.horizon:
                    out += self._push(now, t, ist)
                    self._after_change(now, ist)
        return self._flush(now, out)

    def local_flow(self, now: int, key: int, tree: str, blocked: bool) -> list[Any]:
        t = self.trees.get(tree)
        if t is None:
            return []
        out: list[Any] = []
        for ist in t.istreams.values():
            consumer = ist.consumers.get(key)
            if consumer is not None and consumer.blocked != blocked:
                consumer.blocked = blocked
                if not blocked:
                    out += self._push(now, t, ist)
                self._after_change(now, ist)
        return self._flush(now, out)

    def delivered_through(self, key: int, tree: str) -> dict[str, int]:
        """For local subscription `key`: per pubend of `tree`, the tick up to which every event was
        handed to the broker for it (delivered, or found not to match): its checkpoint's entries."""
        t = self.trees.get(tree)
        if t is None:
            return {}
        out: dict[str, int] = {}
        for pubend, ist in t.istreams.items():
            consumer = ist.consumers.get(key)
            if consumer is not None and key not in t.total:
                out[pubend] = consumer.sent_through
        return out

    def lag(self, key: int, tree: str) -> dict[str, int]:
        """For local subscription `key`: per pubend of `tree`, how many ticks the stream knows of
        (its highest known tick) that have not been handed to the subscription yet."""
        t = self.trees.get(tree)
        if t is None:
            return {}
        return {pubend: max(0, ist.top - consumer.sent_through) for pubend, ist in t.istreams.items()
                if (consumer := ist.consumers.get(key)) is not None}

    def _drop_if_unused(self, tree: str, t: _Tree) -> None:
        if not t.locals and not t.recorded and not self.scribe.children(tree):
            self._streams -= len(t.istreams)
            for pubend, ist in t.istreams.items():
                self.timers.cancel(GapTimer(tree, pubend))
                if ist.origin:  # when the tree has members again (TREE_ACTIVE), its pubends announce
                    self.scribe.remember_publisher(tree, ist.origin)
            del self.trees[tree]

    # ---- acks and nacks from peers -------------------------------------------------------------

    def received(self, now: int, sender: str, message: Any) -> list[Any]:
        decoded = messages.decode(message)
        out: list[Any] = []
        if type(decoded) is messages.StreamAcks:
            for stream in decoded.streams:
                ist = self._istream(stream.tree, stream.pubend)
                if ist is not None and sender in ist.consumers:
                    ist.acked(sender, stream.through, stream.released, stream.delivered)
                    self._after_change(now, ist)
                elif stream.pubend == self.pubend_id:
                    out += self._source(now, self.source.acked(now, stream.tree, stream.through, sender,
                                                               stream.released, stream.delivered))
        elif type(decoded) is messages.Nack:
            out += self._nacked(now, sender, decoded.tree, decoded.pubend, decoded.ranges)
        elif type(decoded) is messages.KnowledgeMessage:  # straight from a pubend that takes us for the root
            if self.scribe.is_root(decoded.tree):
                out += self.event_arrived(now, decoded.tree, [sender, message], sender)
            else:
                out += self._to(now, sender, messages.RootMoved(decoded.tree).to_wire())
        elif type(decoded) is messages.RootMoved:
            self.source.root_moved(decoded.tree, sender)
        elif type(decoded) is messages.SummaryUpdate:
            out += self._summary_received(now, sender, decoded)
        elif type(decoded) is messages.Moved and decoded.home == self.pubend_id:
            out.append(MovedAway(decoded.registration))
        return self._flush(now, out)

    def moved(self, home_address: str, home: str, registration: int) -> list[Any]:
        """Tell the broker at `home_address` that its durable subscription `registration` resumed here."""
        if home_address == self.me.address:
            return []
        return [PeerSend(home_address, messages.Moved(home, registration).to_wire())]

    def _nacked(self, now: int, sender: str, tree: str, pubend: str,
                ranges: tuple[tuple[int, int], ...]) -> list[Any]:
        ist = self._istream(tree, pubend)
        if ist is not None and sender in ist.consumers:
            t = self.trees[tree]
            after = ranges[0][0]
            good = min(t.valid_from, t.redoubted.get(pubend, TICK_MAX))  # knowledge after it is good for it
            if after < good:
                # the child wants ticks from before the point where this broker's knowledge became
                # good for its interest (`valid_from`): its F ticks there may be silence for a
                # narrower summary (an old parent's filtering, before a widening or a repair made
                # this broker root). The child's SUBSCRIBE position was past them, but a child can
                # go back later: a total-order subscription's merge waits a clock-skew allowance,
                # its records leave the small stream cache meanwhile, and the stream forgets them
                # and nacks (Istream._forget_from). Answering with those F ticks turned its events
                # into silence, lost for good (sim seeds 2, 3, 5, 6, 8, 10 of the total-order
                # scenario with a root crash: 59-119 events). They are fetched again instead.
                ist.doubt_after(after, good)
                t.redoubted[pubend] = after
            ist.rewind(sender, after)
            self.retransmissions_sent += 1
            out = self._push(now, self.trees[tree], ist)
            self._after_change(now, ist)
            return out
        if pubend == self.pubend_id:
            synced, log = self._pubend_state()
            return self._source(now, self.source.nacked(now, tree, ranges, synced, log, sender))
        return []

    def _istream(self, tree: str, pubend: str) -> Istream | None:
        t = self.trees.get(tree)
        return None if t is None else t.istreams.get(pubend)

    # ---- timers --------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def handle_timeout(self, now: int) -> list[Any]:
        out: list[Any] = []
        for key in self.timers.pop_due(now):
            if type(key) is SilenceTimer:
                if self.config.best_effort:
                    continue
                synced, _ = self._pubend_state()
                out += self._source(now, self.source.silence(now, synced))
                out += self._release(now, synced)
                self.timers.set(SILENCE, now + self.config.silence_interval_ns)
                for t in self.trees.values():  # the present moved: total-order merges may go on
                    out += self._merge(t)
            else:
                assert isinstance(key, GapTimer)
                out += self._gap_due(now, key)
        return self._flush(now, out)

    def _release(self, now: int, synced: int) -> list[Any]:
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

    def _gap_due(self, now: int, key: GapTimer) -> list[Any]:
        ist = self._istream(key.tree, key.pubend)
        if ist is None:
            return []
        ist.lapse_waits(now)
        # Scribe pruned the tree here (its children left, none local): no knowledge comes to say
        # so, since the pubends' publishes are answered TREE_EMPTY; nobody here wants the gaps
        t = self.trees[key.tree]
        if not t.locals and not self.scribe.has_tree(key.tree):
            self._drop_if_unused(key.tree, t)
            return []
        if not ist.gaps():
            return []
        ist.recalled = 0  # (from now on GCT again, until more ticks are recalled)
        out: list[Any] = []
        interval = max(ist.nack_interval_ns, self.config.nack_repeat_ns_min)
        if ist.upstream is None:
            self.timers.set(key, now + interval)  # repairing: ask once the tree has a parent again
            return []
        # NRT is counted from when the curiosity was last cleared, not from the last nack: gaps that
        # keep appearing beyond an old one are nacked at once, and must not keep the old one quiet.
        # Nor while the horizon moves: a nack's answer is arriving (a long one takes seconds), and
        # asking again would have the pubend read and send it twice
        if ist.curious_ns is None or now - max(ist.curious_ns, ist.moved_ns or 0) >= interval:
            ist.forget_curiosity()  # a new gap, or NRT passed: nack the same ticks again
            if ist.curious_ns is not None:  # unanswered for NRT
                ist.nack_interval_ns = self._repeat_interval(ist, interval)
                ist.nack_repeated = True
            ist.curious_ns = now
        ranges = ist.nack_ranges()
        if ranges:
            ist.nack_ns = now
            self.nacks_sent += 1
            self.nack_ticks_sent += sum(through - after for after, through in ranges)
            out += self._to(now, ist.upstream, messages.Nack(key.tree, key.pubend, tuple(ranges)).to_wire())
        self.timers.set(key, now + max(ist.nack_interval_ns, self.config.nack_repeat_ns_min))
        return out

    def _repeat_interval(self, ist: Istream, interval: int) -> int:
        """NRT after a nack went unanswered for `interval`. Upstream silent on this stream since
        the nack: it (or the pubend above it) may be down, so back off. Upstream heard since: it
        is alive, and the nack or its answer was lost; backing off would only stretch the wait (three
        lost nacks at 10 % loss cost 6 s at a 2 s NRT), so repeat at the round-trip estimate."""
        if ist.nack_ns is not None and ist.heard_ns is not None and ist.heard_ns > ist.nack_ns:
            return self._round_trip(ist.upstream)
        return min(2 * interval, self.config.nack_repeat_ns_max)

    def _round_trip(self, upstream: str | None, sample_ns: int | None = None) -> int:
        """The NRT for nacks to `upstream`, after taking in `sample_ns` if given."""
        if upstream is None:
            return self.config.nack_repeat_ns_min
        estimate = self._round_trips.pop(upstream, None) or RoundTrip()
        self._round_trips[upstream] = estimate  # most recently used last: the oldest is dropped first
        if len(self._round_trips) > ROUND_TRIPS_MAX:
            del self._round_trips[next(iter(self._round_trips))]
        if sample_ns is not None:
            estimate.sample(sample_ns)
        return estimate.threshold(self.config.nack_repeat_ns_min, self.config.nack_repeat_ns_max)

    # ---- sending -------------------------------------------------------------------------------

    def _ack(self, upstream: str, tree: str, pubend: str, through: int, released: int, delivered: int) -> None:
        self._acks.setdefault(upstream, []).append(messages.StreamAck(tree, pubend, through, released, delivered))

    def _flush(self, now: int, out: list[Any]) -> list[Any]:
        """`out` and then the acks gathered while producing it, one ACK per upstream broker."""
        while self._acks:
            acks, self._acks = self._acks, {}
            for address, entries in acks.items():
                for i in range(0, len(entries), messages.ACK_ENTRIES_MAX):
                    chunk = tuple(entries[i:i + messages.ACK_ENTRIES_MAX])
                    out += self._to(now, address, messages.StreamAcks(chunk).to_wire())
        return out

    def _to(self, now: int, address: str, message: list[Any]) -> list[Any]:
        """A message to a peer; to this broker itself (its own pubend's root), handled at once."""
        if address != self.me.address:
            return [PeerSend(address, message)]
        return self.received(now, address, message)

    def status(self) -> dict[str, Any]:
        return {"streams": self._streams, "peer_errors": self.peer_errors, "total_order_late": self.total_order_late,
                "release_asked": self.release_asked, "released": self.released, "delivered": self.delivered,
                "records_unwanted": self.records_unwanted,
                "nacks_sent": self.nacks_sent,
                "nack_ticks_sent": self.nack_ticks_sent,
                "retransmissions_sent": self.retransmissions_sent, "source": self.source.status(),
                "istreams": [ist.status() | {"tree": tree}
                             for tree, t in self.trees.items() for ist in t.istreams.values()][:64]}


def _decode_event(tree: str, event: Any) -> tuple[str, messages.KnowledgeMessage]:
    if type(event) is not list or len(event) != 2 or type(event[0]) is not str:
        raise ProtocolError(BAD_MESSAGE, "a tree event is [origin address, knowledge]")
    knowledge = messages.decode(event[1])
    if type(knowledge) is not messages.KnowledgeMessage or knowledge.tree != tree:
        raise ProtocolError(BAD_MESSAGE, "a tree event carries knowledge of its own tree")
    return event[0], knowledge


def _or(position: int | None, otherwise: int) -> int:
    return otherwise if position is None else position


def _decode_extra(extra: Any) -> tuple[int | None, dict[str, int], tuple[int, Summary | None] | None]:
    """A SUBSCRIBE's [default, [[pubend, horizon], ...], [epoch, summary]] (the last may be absent
    or null: an old peer, filtered by nothing); anything else means "from now on", unfiltered."""
    if (type(extra) is not list or len(extra) not in (2, 3) or not (extra[0] is None or type(extra[0]) is int)
            or type(extra[1]) is not list):
        return None, {}, None
    positions: dict[str, int] = {}
    for item in extra[1][:POSITIONS_PER_SUBSCRIBE_MAX]:
        if type(item) is list and len(item) == 2 and type(item[0]) is str and type(item[1]) is int:
            positions[item[0]] = max(0, item[1])
    asked = None
    if len(extra) == 3 and type(extra[2]) is list and len(extra[2]) == 2 and type(extra[2][0]) is int:
        try:
            asked = (max(0, extra[2][0]), decode_summary(extra[2][1]))
        except ProtocolError:
            asked = None  # a summary that does not parse: this child is sent everything
    return None if extra[0] is None else max(0, extra[0]), positions, asked


__all__ = ["DeliverRecords", "Lost", "MovedAway", "ReliabilityConfig", "ReliabilityNode", "RouteTo"]
