"""The tree streams of one broker: per tree, an istream per pubend, its consumers, and what it pushes.

Theory of operation. Scribe (with `forward_events` off) hands the reliability node every event that
reaches the broker on a tree: a knowledge message of one pubend, from the broker's parent, or, at
the rendez-vous point, from the pubend's broker. The tree streams keep one `Istream` per (tree,
pubend) whose consumers are the broker's children in the tree, its local subscriptions of that tree
and, on a tree with durable registrations, the PFS consumer (local_consumers.py), and push per
consumer what its stream lets it (istream.py): to a child a knowledge message filtered by the
child's summary and stamped with its epoch (`SendToChild`, which Scribe sends as EVENT and which
keeps Scribe's liveness), to local subscriptions `DeliverRecords` and `Lost` (in total order through the
merge, merge.py), to the PFS `Recorded`.

After every change a stream acknowledges upstream what all its consumers have (acks.py gathers
them, one ACK per upstream broker and input) and its curiosity watches its gaps (curiosity.py). A
child's nack rewinds that child's stream (`nacked`). Consumers follow the children Scribe tells
of (`tree_changed`: the tree's shape is kept, never asked); a tree nothing needs here any more is
dropped, and Scribe is asked to tell its pubends when it has members again (`RememberPublisher`).

Tree membership changes carry positions. A broker that joins a tree, or repairs its place in it,
puts in its SUBSCRIBE the horizon of each pubend it has heard of and a default for the others (the
oldest tick any of its consumers wants), with its interest (`join_extra`); the new parent attaches
the child at those positions (`child_added`), so whatever was in flight through a failed broker is
sent again, or nacked upward when the parent has not got it. Filter summaries and their epochs are
the tree's `Interest` (interest.py).

A child whose peer link is congested (`congested`) is pushed nothing; its records wait in the
stream's cache, and `link_drained` sends what it is owed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tidings.core.clock import WallClock
from tidings.core.deadlines import Alarm
from tidings.core.durable.constream import Recorded
from tidings.core.errors import ProtocolError
from tidings.core.event import TICK_MAX
from tidings.core.multicast.effects import TreeShape
from tidings.core.overlay.node_id import NodeRef
from tidings.core.reliability import messages
from tidings.core.reliability.acks import AckBatcher
from tidings.core.reliability.curiosity import Curiosity, CuriosityConfig, TreePruned
from tidings.core.reliability.effects import DeliverRecords, Lost, RememberPublisher, SendToChild, StreamEffect
from tidings.core.reliability.interest import Interest
from tidings.core.reliability.istream import Istream, StreamLimits
from tidings.core.reliability.merge import TotalOrderMerge
from tidings.core.reliability.summary import Summary, whole_tree
from tidings.core.reliability.summary import decode as decode_summary
from tidings.core.reliability.tree import PFS_CONSUMER, Held, Tree
from tidings.core.units import ns_to_us
from tidings.core.wire.packable import Packable, WireArray

if TYPE_CHECKING:
    from tidings.core.reliability.node import ReliabilityConfig

POSITIONS_PER_SUBSCRIBE_MAX = 4096  # pubend horizons a repairing child may name
ByAddress = Callable[[str], bool]  # a question about the broker at an address (its link congested, its version)


class TreeStreams:
    def __init__(self, me: NodeRef, pubend_id: str, config: ReliabilityConfig, held: Held, congested: ByAddress,
                 alarm: Alarm | None = None, takes_complete: ByAddress = lambda address: True) -> None:
        self.me = me
        self.pubend_id = pubend_id
        self.config = config
        self.summary_bytes_max = config.summary_bytes_max
        self._held = held
        self._congested = congested  # the peer link to this address is past its high-water mark
        self._limits = StreamLimits(config.stream_cache_bytes_max, config.nack_ranges_max,
                                    config.nack_range_ticks_max, config.knowledge_bytes_max, config.nack_merge_ticks,
                                    ns_to_us(config.flow_stall_ns) if config.flow_window_bytes else 0)
        self.trees: dict[str, Tree] = {}
        self.streams = 0
        self._shapes: dict[str, TreeShape] = {}  # the trees as Scribe last told them (tree_changed)
        self.acks = AckBatcher()  # drained by the reliability node when its input is handled
        self.curiosity = Curiosity(CuriosityConfig(config.gap_curiosity_ns, config.nack_repeat_ns_min,
                                                   config.nack_repeat_ns_max, config.nack_complete),
                                   self._pruned, alarm, takes_complete)
        self.total_order = TotalOrderMerge(config.clock_skew_allowance_us)
        self.records_unwanted = 0  # first-time data that reached this broker though nothing here or below wanted it
        self.retransmissions_sent = 0
        self.complete_nack_ticks_silenced = 0  # ticks a child's complete nack spared fetching (Istream.rewind_complete)
        self._evicted_gone = 0  # cache evictions of the streams since dropped (`cache_records_evicted`)
        self.clock = WallClock()  # the broker's, at the latest input that had one (merge point, epochs; core/clock.py)

    @property
    def wall_us(self) -> int:
        return self.clock.us

    @wall_us.setter
    def wall_us(self, value: int) -> None:
        self.clock.us = value

    # ---- knowledge arriving on a tree -----------------------------------------------------------

    def arrived(self, now: int, tree: str, origin: str, knowledge: messages.KnowledgeMessage,
                sender: str) -> list[StreamEffect]:
        """Knowledge of one pubend came down `tree` from `sender` (its pubend's broker: `origin`)."""
        upstream = sender  # the parent, or at the root the pubend's broker (the route's source)
        out: list[StreamEffect] = []
        t = self.trees.get(tree)
        ist = None if t is None else t.istreams.get(knowledge.pubend)
        if ist is None:
            ist = self._new_istream(tree, knowledge.pubend, knowledge.after)
            if ist is None:  # nobody here consumes it: acknowledge it so upstream is not held up
                held = self._held(tree, knowledge.pubend)  # (a disconnected durable subscription may hold release)
                through = knowledge.through
                self.acks.ack(upstream, tree, knowledge.pubend, through,
                               through if held is None else min(held, through), through)
                return out
        ist.upstream = upstream
        ist.origin = origin
        self.curiosity.heard(now, ist)
        t = self.trees[tree]
        out += self._sync_children(now, t, ist)
        if knowledge.lost:  # released at the pubend: L whatever the summary was
            moved = ist.lose(knowledge.after, knowledge.through)
        elif knowledge.epoch is None or knowledge.epoch == t.interest.epoch:
            moved = ist.accumulate(knowledge.after, knowledge.through, knowledge.ticks, knowledge.records)
        else:  # filtered by a summary the parent should no longer hold: its F ticks prove nothing
            moved = False
            for tick, record in zip(knowledge.ticks, knowledge.records, strict=True):
                moved = ist.accumulate(tick - 1, tick, (tick,), (record,)) or moved
            out += t.interest.stale_stamp(now, upstream, knowledge.epoch, t.istreams)
        if knowledge.records and not knowledge.retransmit:
            self._count_unwanted(tree, t, knowledge.records)
        if moved:
            self.curiosity.moved(now, ist)  # (a nack's answer: its round trip, curiosity.py)
            out += self._push(now, t, ist)
        elif knowledge.through <= ist.acked_sent:  # our ack may be lost: the point last sent, never above (delivery.md)
            self.acks.ack(upstream, tree, ist.pubend, ist.point_sent, max(0, ist.released_sent),
                           max(0, ist.released_sent, ist.delivered_sent))
        self._after_change(now, ist)
        return out

    def _new_istream(self, tree: str, pubend: str, after: int) -> Istream | None:
        t = self.trees.get(tree)
        if t is None:
            if not self._children(tree):
                return None
            t = self.trees[tree] = self._new_tree(tree)
        positions = [_or(t.defaults.get(child), after) for child in self._children(tree)]
        positions += [t.start_of(key, pubend, start) for key, start in t.locals.items()
                      if t.wants(key, pubend, self.pubend_id)]
        if t.recorded and pubend != self.pubend_id:  # from where its durable registrations released it
            held = self._held(tree, pubend)
            positions.append(after if held is None else min(held, after))
        if not positions or self.streams >= self.config.streams_max:
            return None
        ist = t.istreams[pubend] = Istream(tree, pubend, min(positions), self._limits)
        self.curiosity.watch(ist)
        self.streams += 1
        if t.recorded and pubend != self.pubend_id:  # the PFS then covers what they may come back for
            ist.attach(PFS_CONSUMER, ist.floor)
        for key, start in t.locals.items():
            if t.wants(key, pubend, self.pubend_id):
                ist.attach(key, t.start_of(key, pubend, start))
        return ist

    def _sync_children(self, now: int, t: Tree, ist: Istream) -> list[StreamEffect]:
        """Consumers follow Scribe's children table: new children at their default (ChildAdded
        attached them to the streams there were then; this is a new stream), gone ones out (the
        tree's interest follows)."""
        children = self._children(ist.tree)
        added = [child for child in children if child not in ist.consumers]
        for child in added:  # on a stream just heard of: its knowledge is all from this message
            ist.attach(child, _or(t.defaults.get(child), ist.horizon))
        gone = [k for k in ist.consumers if type(k) is str and k not in children]
        for key in gone:
            ist.detach(key, now, self.config.release_hold_ns)
            t.defaults.pop(key, None)
            t.interest.child_left(key)
        if not added and not gone:
            return []
        return self._resummarize(now, ist.tree, t, {}, TICK_MAX)

    def _push(self, now: int, t: Tree, ist: Istream) -> list[StreamEffect]:
        """Send every consumer what it can have now; local subscriptions in step are served as one."""
        out: list[StreamEffect] = []
        groups: dict[int, list[int]] = {}
        for key, consumer in ist.consumers.items():
            if type(key) is str:
                if self._congested(key):  # its link's queue is bounded: what it took now would be dropped and
                    continue              # nacked again; it is sent once the link drains (link_drained)
                epoch, summary = t.interest.filter_for(key) if self.config.filtering else (None, None)
                stamp = None if summary is None else epoch
                checked = None if whole_tree(summary, ist.tree) else summary
                for piece in ist.sparse.holes(ist.pieces_for(consumer, summary=checked)):
                    wire = messages.knowledge_wire(ist.tree, ist.pubend, piece.after, piece.through, piece.ticks,
                                                   piece.records, False, stamp, piece.lost)
                    out.append(SendToChild(ist.tree, key, [ist.origin, wire]))
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

    def _merge(self, t: Tree) -> list[StreamEffect]:
        """Total order: the tree's total-order subscriptions get what the merge point allows (merge.py)."""
        return list(self.total_order.merge(t.total, t.istreams, self.wall_us))

    def merge_all(self) -> list[StreamEffect]:
        """The present moved: every tree's total-order merge may go on."""
        out: list[StreamEffect] = []
        for t in self.trees.values():
            out += self._merge(t)
        return out

    def _after_change(self, now: int, ist: Istream) -> None:
        """Acknowledge what all consumers have, with the release point below (the stream bounds its
        cache and memory in the same call, `Istream.settle`), and watch the gaps."""
        ack = ist.settle(now, self._held(ist.tree, ist.pubend))
        if ack is not None:
            assert ist.upstream is not None
            self.acks.ack(ist.upstream, ist.tree, ist.pubend, *ack)
        self.curiosity.changed(now, ist)

    # ---- tree membership -----------------------------------------------------------------------

    def join_extra(self, tree: str) -> WireArray:
        """What this broker's SUBSCRIBE to `tree` carries: [default, [[pubend, horizon], ...],
        [epoch, summary]], the default (None: "from now on") for the pubends it has not heard of,
        and its interest in the tree with its epoch (what the new parent filters by)."""
        default, positions, interest = self._join_parts(tree)
        return [default, [[p, tick] for p, tick in positions], interest]

    def _join_parts(self, tree: str) -> tuple[int | None, list[tuple[str, int]], WireArray | None]:
        """`join_extra`'s three parts, typed: the default, the positions, the interest."""
        t = self.trees.get(tree)
        if t is None:
            return None, [], None
        horizons = {p: ist.horizon for p, ist in t.istreams.items()}
        for named in t.positions.values():  # pubends a durable subscription wants from a position
            for p, tick in named.items():      # and this broker has not heard of yet
                if p not in t.istreams:
                    horizons[p] = min(tick, horizons.get(p, tick))
        positions = list(horizons.items())[:POSITIONS_PER_SUBSCRIBE_MAX]
        wanted = [w for w in [*t.locals.values(), *t.defaults.values()] if w is not None]
        return min(wanted) if wanted else None, positions, t.interest.for_join(self._interest(tree, t), self.wall_us)

    def forwarder_extra(self, tree: str, child_extra: Packable) -> WireArray:
        """The SUBSCRIBE of a broker that becomes a forwarder of `tree` for its first child: the
        child's positions (the lower where both name a pubend) and this broker's own interest (its
        epoch and summary: the child's would be stamped as this broker's own)."""
        default, positions, _ = _decode_extra(child_extra)
        my_default, my_positions, my_interest = self._join_parts(tree)
        for pubend, horizon in my_positions:
            positions[pubend] = min(horizon, positions.get(pubend, horizon))
        defaults = [d for d in (default, my_default) if d is not None]
        return [min(defaults) if defaults else None,
                [[p, h] for p, h in list(positions.items())[:POSITIONS_PER_SUBSCRIBE_MAX]], my_interest]

    def child_added(self, now: int, tree: str, child: str, extra: Packable) -> list[StreamEffect]:
        default, positions, asked = _decode_extra(extra)
        t = self.trees.get(tree)
        if t is None:
            t = self.trees[tree] = self._new_tree(tree)
        t.defaults[child] = default
        t.interest.child_joined(child, asked)
        attached = {pubend: ist.attach(child, positions.get(pubend, _or(default, ist.horizon))).sent_through
                    for pubend, ist in t.istreams.items()}
        out = self._resummarize(now, tree, t, attached, _or(default, TICK_MAX))
        for ist in t.istreams.values():
            out += self._push(now, t, ist)
            self._after_change(now, ist)
        return out

    # ---- filter summaries ---------------------------------------------------------------------

    def interest(self, tree: str) -> Interest | None:
        """The filter-summary state of `tree` here (read it only: its epoch, what was sent up)."""
        t = self.trees.get(tree)
        return None if t is None else t.interest

    def _new_tree(self, tree: str) -> Tree:
        return Tree({}, {}, {}, {}, Interest(tree, self.config.summary_bytes_max, self.config.gap_curiosity_ns))

    def _interest(self, tree: str, t: Tree) -> Summary | None:
        """What this broker's local subscriptions and children of `tree` want, merged."""
        return t.interest.wanted(self._children(tree))

    def _count_unwanted(self, tree: str, t: Tree, records: tuple[bytes, ...]) -> None:
        """The filtering's measure: first-time data records no subscription here or below matches
        (exactly: no size limit), counted in `records_unwanted` (not at the root)."""
        if self._is_root(tree):  # the root is sent everything by design
            return
        self.records_unwanted += t.interest.unwanted(records, self._children(tree))

    def _resummarize(self, now: int, tree: str, t: Tree, positions: dict[str, int], since: int) -> list[StreamEffect]:
        """The tree's interest may have changed (interest.py); `positions` (per pubend, `since` for
        the others) are where consumers whose wants grew resume."""
        return list(t.interest.resummarize(self._interest(tree, t), self._is_root(tree), self._parent(tree),
                                           t.istreams, positions, since, self.wall_us))

    def summary_received(self, now: int, child: str, update: messages.SummaryUpdate) -> list[StreamEffect]:
        """A child's interest in a tree: filter by it from now on; after a widening, send the child
        everything after `since` again (once this broker's own knowledge is good for it)."""
        t = self.trees.get(update.tree)
        if t is None or child not in self._children(update.tree):
            return []
        grown = t.interest.child_summary(child, update, t.istreams)
        if grown is None:
            return []
        out = self._resummarize(now, update.tree, t, *grown)
        for ist in t.istreams.values():
            out += self._push(now, t, ist)
            self._after_change(now, ist)
        return out

    # ---- peers' acks and nacks, links ---------------------------------------------------------------

    def acked(self, now: int, sender: str, stream: messages.StreamAck) -> bool:
        """A child's ack of one stream; False when `sender` is no consumer of such a stream here."""
        ist = self._istream(stream.tree, stream.pubend)
        if ist is None or sender not in ist.consumers:
            return False
        ist.acked(sender, stream.through, stream.released, stream.delivered)
        self._after_change(now, ist)
        return True

    def nacked(self, now: int, sender: str, nack: messages.Nack) -> list[StreamEffect] | None:
        """A child's nack of a stream: rewind it (a complete nack: only its ranges are fetched,
        Istream.rewind_complete); None when `sender` is no consumer of such a stream here."""
        ist = self._istream(nack.tree, nack.pubend)
        if ist is None or sender not in ist.consumers:
            return None
        tree, after = nack.tree, nack.ranges[0][0]
        self.trees[tree].interest.nacked_before(ist, after)
        if nack.complete:
            self.complete_nack_ticks_silenced += ist.rewind_complete(sender, nack.ranges)
        else:
            ist.rewind(sender, after)
        self.retransmissions_sent += 1
        out = self._push(now, self.trees[tree], ist)
        self._after_change(now, ist)
        return out

    def link_drained(self, now: int, address: str) -> list[StreamEffect]:
        """The peer link to `address` took what it held: send that child what it was held back."""
        out: list[StreamEffect] = []
        for t in self.trees.values():
            for ist in t.istreams.values():
                consumer = ist.consumers.get(address)
                if consumer is not None and consumer.sent_through < ist.horizon:
                    out += self._push(now, t, ist)
                    self._after_change(now, ist)
        return out

    def _drop_if_unused(self, tree: str, t: Tree) -> list[StreamEffect]:
        out: list[StreamEffect] = []
        if not t.locals and not t.recorded and not self._children(tree):
            self.streams -= len(t.istreams)
            self._evicted_gone += sum(ist.cache_evicted for ist in t.istreams.values())
            for pubend, ist in t.istreams.items():
                self.curiosity.unwatch(tree, pubend)
                if ist.origin:  # when the tree has members again (TREE_ACTIVE), its pubends announce
                    out.append(RememberPublisher(tree, ist.origin))
            del self.trees[tree]
        return out

    def _istream(self, tree: str, pubend: str) -> Istream | None:
        t = self.trees.get(tree)
        return None if t is None else t.istreams.get(pubend)

    # ---- timers (the streams' curiosity) ---------------------------------------------------------

    def next_deadline(self) -> int | None:
        return self.curiosity.next_deadline()

    def handle_timeout(self, now: int) -> list[StreamEffect]:
        """Nacks whose time came (curiosity.py), and trees Scribe pruned here dropped."""
        out: list[StreamEffect] = []
        for eff in self.curiosity.handle_timeout(now):
            if isinstance(eff, TreePruned):
                t = self.trees.get(eff.tree)
                if t is not None:
                    out += self._drop_if_unused(eff.tree, t)
            else:
                out.append(eff)
        return out

    # ---- the trees as Scribe tells them ------------------------------------------------------------

    def tree_changed(self, shape: TreeShape) -> None:
        """Scribe's word on a tree's shape here (presence, root, parent, children): kept, never asked."""
        if shape.present:
            self._shapes[shape.tree] = shape
        else:
            self._shapes.pop(shape.tree, None)

    def _children(self, tree: str) -> tuple[str, ...]:
        shape = self._shapes.get(tree)
        return () if shape is None else shape.children

    def _is_root(self, tree: str) -> bool:
        shape = self._shapes.get(tree)
        return shape is not None and shape.root

    def _parent(self, tree: str) -> str | None:
        shape = self._shapes.get(tree)
        return None if shape is None else shape.parent

    def children(self, tree: str) -> tuple[str, ...]:
        """This broker's children in `tree`, as Scribe last told."""
        return self._children(tree)

    def is_root(self, tree: str) -> bool:
        """This broker is the rendez-vous point of `tree`, as Scribe last told."""
        return self._is_root(tree)

    def _pruned(self, tree: str) -> bool:
        """Scribe pruned `tree` here (its children left) and no local subscription has it."""
        t = self.trees.get(tree)
        return t is not None and not t.locals and tree not in self._shapes

    # ---- the hooks of the local and PFS consumers (local_consumers.py) -----------------------------

    def tree(self, tree: str) -> Tree:
        """The state of `tree` here, made when it has none yet."""
        t = self.trees.get(tree)
        if t is None:
            t = self.trees[tree] = self._new_tree(tree)
        return t

    def resummarize(self, now: int, tree: str, t: Tree, positions: dict[str, int], since: int) -> list[StreamEffect]:
        """A local consumer of `tree` came or went: its interest may have changed (`_resummarize`)."""
        return self._resummarize(now, tree, t, positions, since)

    def serve(self, now: int, t: Tree, ist: Istream, push: bool = True) -> list[StreamEffect]:
        """A local consumer of `ist` moved: push what every consumer can have now (unless not
        `push`), then acknowledge what all have and watch the gaps."""
        out = self._push(now, t, ist) if push else []
        self._after_change(now, ist)
        return out

    def drop_if_unused(self, tree: str, t: Tree) -> list[StreamEffect]:
        """`tree` is dropped here when nothing needs it any more (`_drop_if_unused`)."""
        return self._drop_if_unused(tree, t)

    @property
    def cache_records_evicted(self) -> int:
        """Records the streams' caches let go past `stream_cache_bytes_max` while a consumer still
        wanted them (a blocked child or subscription: those it then needs are nacked)."""
        return self._evicted_gone + sum(ist.cache_evicted for t in self.trees.values() for ist in t.istreams.values())

    def status(self) -> list[dict[str, object]]:
        return [ist.status() | {"tree": tree} for tree, t in self.trees.items() for ist in t.istreams.values()][:64]


def _or(position: int | None, otherwise: int) -> int:
    return otherwise if position is None else position


def _decode_extra(extra: object) -> tuple[int | None, dict[str, int], tuple[int, Summary | None] | None]:
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


__all__ = ["POSITIONS_PER_SUBSCRIBE_MAX", "TreeStreams"]
