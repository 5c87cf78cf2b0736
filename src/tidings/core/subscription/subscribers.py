"""The subscriber's side of a broker: admitting SUBSCRIBE and READ, and the life of each local
subscription across its connection, its tree, its lease and its durable binding (Gryphon's subends
and durable subscriptions §2-§4, Scribe §2.2 with access lists, PsEPR §3.3 leases).

Theory of operation. The composer hands this side each SUBSCRIBE, READ, UNSUBSCRIBE, RENEW and
RELEASE (`message`). A SUBSCRIBE (or a READ, a bounded SUBSCRIBE answered in bulk) is admitted in
this order, and the first check that fails refuses it with its reason (`Refuse`, an ERROR to the
client that names the subscription) and opens nothing:

1. the connection may open it, its pattern and filter parse (subscription/start.py `check_subscribe`);
2. the guard's access rules and `subscriptions_max`, then the access list this broker holds for the
   pattern's tree (multicast/local_trees.py `refusal`);
3. its start, with the clock-skew allowance for other pubends (`resolve_start`), and for a durable
   one its checkpoint (core/durable/subscriptions.py `checkpoint`: a bad token is refused here).

The subscription then opens in the table (subscription/table.py) and, unless bounded, becomes a
member of its pattern's tree (`LocalTrees.join`). In an overlay the answer is a `JoinStreams` for
the composer to carry out: the reliability node's streams for it and the broker's SUBSCRIBE (CREATE
first when the broker creates the tree). Scribe may refuse that join synchronously (`trees_max`, a
local limit reached on the client's behalf): the composer then hands back `join_refused`, which
takes back everything the admission did and refuses; else `opened`, which takes the subscription
into the index, its connection's lease and, for a durable one, its binding
(`DurableSubscriptions.begin`: a registration, saved before SUBSCRIBED names it; a refusal past
`durable_registrations_max` ends it again), then answers SUBSCRIBED and asks (`Advance`) that it
move on once all that is carried out.

A subscription ends (`drop`) when unsubscribed, refused, expired, when its connection goes or when a
tree's access list stops admitting it (`access_changed`: a `forbidden` ERROR each, then the
connection holds its refusals). A durable one whose connection went, or that was unsubscribed
without `forget`, is away: its registration holds its place in the tree (`LeaveStreams` and the
tree effects say what the broker's membership becomes). Leases that ran out end every subscription
of their connection (`leases_expired`), away when durable.

Every call returns typed effects, in the order the composer must carry them out
(core/broker/broker.py `_carry`): the runtime's effects, the reliability node's (`Settle`,
`LeaveStreams`, `TellHome`), the trees' (`JoinTree`, `NameMembers`, `LeaveTree`, `CreateTree`), the
constream's (`Registered`, `Resume`), the client connection's (`Refuse`, `HoldRefusals`), and the
ones that come back here once what precedes them is carried out (`EndSubscription`, `Advance`).
Nothing here calls another machine: what the trees' streams know is read through `TreeStreams`.

Invariants: a subscription is in its connection's `subs` exactly when it is in the table; one that
ends leaves its tree once, and its lease goes with the connection's last subscription.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from tidings.core.auth.guard import Guard
from tidings.core.broker.connection import ClientConnection
from tidings.core.config import BrokerConfig
from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.durable.subscriptions import (
    DURABLE_SAVE,
    DURABLE_SILENCE,
    DurableSilenceTimer,
    DurableSubscriptions,
    DurableTimer,
    Outcome,
    Registered,
    Resume,
    TellHome,
)
from tidings.core.effects import Effect, Send
from tidings.core.errors import TidingsError
from tidings.core.inputs import LogRead
from tidings.core.multicast.effects import AccessChanged
from tidings.core.multicast.local_trees import AccessLists, CreateTree, TreeEffect
from tidings.core.multicast.trees import subscription_tree
from tidings.core.subscription.leases import EndSubscription, LeaseEffect, Leases, lapsed
from tidings.core.subscription.start import check_subscribe, from_read, resolve_start
from tidings.core.subscription.subscription import Subscription
from tidings.core.subscription.table import LocalSubscriptions, TableEffect, TreeStreams
from tidings.core.wire import messages


class At(NamedTuple):
    """What the composer knows at the input being handled that this side reads."""

    now: int
    wall_us: int  # the last wall clock an input brought
    synced_tick: int  # this broker's pubend is durable through this tick
    released_through: int  # and its log released through this one
    me: str | None  # this broker's address in the overlay (None outside one)
    streams: TreeStreams | None  # what the trees know of the local subscriptions (None outside an overlay)


@dataclass(slots=True)
class Admitted:
    """A subscription the admission opened, for `opened` once it joined its tree (or `join_refused`)."""

    s: Subscription
    position: int  # where it starts on this broker's own pubend (SUBSCRIBED says so)
    checkpoint: Checkpoint | None
    name: tuple[str, str] | None  # a named durable subscription's (service, name)


class JoinStreams(NamedTuple):
    """Subscription `key` joins `tree` in the reliability node (from `start` for other pubends,
    from `positions` for those a durable token names), and the broker's membership does `joins`;
    then `opened(then)`. Scribe may refuse it (TidingsError): `join_refused(then)` instead."""

    key: int
    tree: str
    start: int
    total: bool
    pattern: str
    filter_text: str
    positions: dict[str, int] | None
    joins: list[TreeEffect]
    then: Admitted


class Refuse(NamedTuple):
    """An ERROR `code` for subscription `sub` of connection `conn` (its refusal window counts it)."""

    conn: int
    sub: int
    code: str
    text: str


class HoldRefusals(NamedTuple):
    """Connection `conn` was refused: it is not read while its refusals are held (broker/reading.py)."""

    conn: int


class Advance(NamedTuple):
    """Move subscription `s` on (`Subscription.advance`) once what precedes this is carried out."""

    s: Subscription


class Chop(NamedTuple):
    """The durable state was saved: the constream drops what no registration needs any longer
    (durable/constream.py)."""


SubscriberEffect = (TableEffect | LeaseEffect | JoinStreams | Refuse | HoldRefusals | Advance | Registered | Resume
                    | TellHome | CreateTree | Chop)
SubscriberMessage = messages.Subscribe | messages.Read | messages.Unsubscribe | messages.Renew | messages.Release


class Subscribers:
    __slots__ = ("_held_trees", "config", "durable", "guard", "leases", "local", "timers")

    def __init__(self, config: BrokerConfig, guard: Guard, local: LocalSubscriptions, leases: Leases,
                 durable: DurableSubscriptions, alarm: Alarm | None = None) -> None:
        """`alarm`: the broker's earliest deadline, told when a timer moves (core/deadlines.py)."""
        self.config = config
        self.guard = guard
        self.local = local
        self.leases = leases
        self.durable = durable
        self.timers: Deadlines[DurableTimer] = Deadlines(alarm)  # SILENCE and the durable save
        self._held_trees: Callable[[], dict[str, int]] = dict  # the pubend's, saved with the state (`start`)

    def start(self, now: int, lists: AccessLists, held_trees: Callable[[], dict[str, int]] = dict) -> list[TreeEffect]:
        """The broker takes part in an overlay: the away durable registrations it saved hold their
        trees, which it joins under `lists` (Scribe's); the durable state is saved from now on, with
        the trees the pubend holds (`held_trees`: reliability/source.py)."""
        self._held_trees = held_trees
        for tree, count in self.durable.registrations.trees().items():
            self.local.memberships.hold(tree, count)
        self.timers.set(DURABLE_SAVE, now + self.config.durable_save_interval_ns)
        return self.local.trees.start(lists)

    def message(self, at: At, c: ClientConnection, msg: SubscriberMessage) -> list[SubscriberEffect]:
        """A client's SUBSCRIBE, READ, UNSUBSCRIBE, RENEW or RELEASE."""
        if isinstance(msg, messages.Subscribe):
            return self._subscribe(at, c, msg)
        if isinstance(msg, messages.Read):  # a bounded subscription that answers in bulk
            spans = msg.spans and self.config.spans_fit_frames and self.local.trees.may_read_everything(c.identity)
            return self._subscribe(at, c, from_read(msg), bulk=True, spans=spans)
        if isinstance(msg, messages.Unsubscribe):
            return self.unsubscribe(at, c, msg.sub, msg.forget)
        if isinstance(msg, messages.Renew):
            self.leases.renew(at.now, c.conn)
            return []
        return self.release(c, msg)

    # ---- admission -------------------------------------------------------------------------------

    def _subscribe(self, at: At, c: ClientConnection, msg: messages.Subscribe, bulk: bool = False,
                   spans: bool = False) -> list[SubscriberEffect]:
        """Subscription `msg` of `c` passes the checks and opens (once it joined its tree), or is refused."""
        try:
            pattern, flt = check_subscribe(msg, c.subs, self.config.subscriptions_per_connection_max,
                                           at.streams is not None)
        except TidingsError as exc:
            return [Refuse(c.conn, msg.sub, exc.code, str(exc))]
        denied = (self.guard.check_subscribe(c.identity, pattern)  # access rules, subscriptions_max
                  or self.local.trees.refusal(c.identity, pattern))  # the tree's creator's, when held here
        if denied is not None:
            return [Refuse(c.conn, msg.sub, denied.code, str(denied))]
        begin = resolve_start(msg, at.synced_tick, at.released_through, at.wall_us,
                              self.config.clock_skew_allowance_ns)
        own = self.durable.pubend_id
        try:
            checkpoint = self.durable.checkpoint(c.service, msg, begin.position, begin.remote, at.me)
        except TidingsError as exc:
            return [Refuse(c.conn, msg.sub, exc.code, str(exc))]
        position = begin.position if checkpoint is None else checkpoint.position(own)
        s = self.local.open(c.conn, msg.sub, own, pattern, flt, position, begin.end, begin.from_oldest,
                            msg.order == messages.ORDER_TOTAL, bulk, spans)
        c.subs[msg.sub] = s
        name = (c.service, msg.home) if checkpoint is not None and type(msg.home) is str else None
        admitted = Admitted(s, position, checkpoint, name)
        if begin.end is None:
            tree = subscription_tree(pattern)
            joins = self.local.trees.join(s.key, tree, (c.identity, s.pattern))
            if at.streams is not None:
                # a durable one's other pubends from its checkpoint's default (a named one resumed: where
                # its registration was released, not "now" less the skew allowance)
                remote = begin.remote if checkpoint is None else checkpoint.default
                return [JoinStreams(s.key, tree, remote, s.total, s.pattern,
                                    "" if s.filter is None else s.filter.text,
                                    None if checkpoint is None else checkpoint.positions, joins, admitted)]
        return self.opened(at, c, admitted)

    def join_refused(self, c: ClientConnection, a: Admitted, exc: TidingsError) -> Refuse:
        """Scribe refused the join of `a` (the reliability node's streams are taken back already):
        nothing of it stays."""
        s = a.s
        self.local.trees.undo(s.key)
        del self.local.subends[s.key], c.subs[s.sub]
        return Refuse(c.conn, s.sub, exc.code, str(exc))

    def opened(self, at: At, c: ClientConnection, a: Admitted) -> list[SubscriberEffect]:
        """`a` joined its tree (or has none): the index, the lease, the durable binding, SUBSCRIBED."""
        s, checkpoint = a.s, a.checkpoint
        if s.end is None:
            self.local.joined(s)
        self.leases.hold(at.now, c.conn)
        out: list[SubscriberEffect] = []
        if checkpoint is not None:
            try:
                out += self._bind(at, s, checkpoint, a.name)
            except TidingsError as exc:
                out += self.drop(at, c, s)
                out.append(Refuse(c.conn, s.sub, exc.code, str(exc)))
                return out
        out.append(Send(c.conn, messages.subscribed(s.sub, a.position,
                                                    None if checkpoint is None else checkpoint.to_wire())))
        out.append(Advance(s))
        return out

    # ---- the durable binding ---------------------------------------------------------------------

    def _bind(self, at: At, s: Subscription, checkpoint: Checkpoint,
              name: tuple[str, str] | None) -> list[SubscriberEffect]:
        """Durable subscription `s` starts at `checkpoint`: bound to a registration (TidingsError
        past the registrations limit); a resumed one's catchup asks the PFS what matched it while
        it was away."""
        positions = dict(checkpoint.positions)
        outcome = self.durable.begin(s.key, s.pattern, "" if s.filter is None else s.filter.text, checkpoint,
                                     self.local.memberships.tree_of[s.key], name, at.me)
        s.bind(outcome.registration, positions)
        out = self.outcome(outcome)
        out.append(Resume(s.key, outcome.resumed, checkpoint, s.pattern, s.filter))
        if DURABLE_SILENCE not in self.timers:
            self.timers.set(DURABLE_SILENCE, at.now + self.config.durable_silence_interval_ns)
        return out

    def outcome(self, outcome: Outcome) -> list[SubscriberEffect]:
        """What the durable machine decided (core/durable/subscriptions.py), as effects in order."""
        out: list[SubscriberEffect] = list(outcome.effects)
        for key in outcome.unbound:
            bound = self.local.subends.get(key)
            if bound is not None:
                bound.unbind()
        out.append(Registered(outcome.added, outcome.dropped))
        for tree in outcome.gone:  # an away durable registration ended (or its subscriber is back)
            out += self.local.trees.member_gone(tree)
        out += [TellHome(home) for home in outcome.moved]
        return out

    def timed_out(self, at: At, wall_us: int) -> Iterator[SubscriberEffect]:
        """The SILENCE and save timers due by `at.now`, in order: each one's effects are yielded
        and carried out before the next one is handled; a save is followed by a `Chop`."""
        for key in self.timers.pop_due(at.now):
            if type(key) is DurableSilenceTimer:
                yield from self.silence(at)
            else:
                yield from self.save(at.now, wall_us, self._held_trees())
                yield Chop()

    def silence(self, at: At) -> list[Effect]:
        """Each durable subscription's SILENCE, with what the trees passed it (reliability/node.py)."""
        if self.local.durable():
            self.timers.set(DURABLE_SILENCE, at.now + self.config.durable_silence_interval_ns)
        return self.local.silence(at.synced_tick, at.streams)

    def save(self, now: int, wall_us: int, held_trees: dict[str, int]) -> list[SubscriberEffect]:
        """Registrations away too long end; the durable state is saved when it changed (with the
        pubend's `held_trees`)."""
        self.timers.set(DURABLE_SAVE, now + self.config.durable_save_interval_ns)
        return self.outcome(self.durable.save(wall_us, held_trees))

    def release(self, c: ClientConnection, msg: messages.Release) -> list[SubscriberEffect]:
        """RELEASE: the application consumed everything through the checkpoint of durable
        subscription `msg.sub`; refused when it is no durable subscription or no token."""
        s = c.subs.get(msg.sub)
        try:
            self.durable.release(s is not None and s.durable, None if s is None else s.registration, msg.sub,
                                 msg.checkpoint)
        except TidingsError as exc:
            return [Refuse(c.conn, msg.sub, exc.code, str(exc))]
        return []

    def moved_away(self, registration: int) -> list[SubscriberEffect]:
        """The subscriber of `registration` resumed at another broker, which told this one (MOVED)."""
        self.durable.registrations.moved_total += 1
        return self.outcome(self.durable.forget(registration))

    # ---- moves -----------------------------------------------------------------------------------

    def log_read(self, inp: LogRead) -> list[SubscriberEffect]:
        """A subscription's catch-up read came back: what it delivers, then its next move."""
        effects, s = self.local.log_read(inp)
        out: list[SubscriberEffect] = list(effects)
        return out if s is None else [*out, Advance(s)]

    def advance(self, s: Subscription, blocked: bool, synced_tick: int) -> list[TableEffect]:
        """Move a subscription that is not live on (`Subscription.advance`); one that finished ends."""
        return self.local.advance(s, blocked, synced_tick, self.config.log_read_bytes_max)

    def flow(self, at: At, c: ClientConnection, blocked: bool) -> list[TableEffect]:
        """`c`'s send queue passed send_queue_bytes_max (`blocked`: its live subscriptions' events
        turn into log reads) or drained (those not live move on)."""
        return self.local.flow(at.now, list(c.subs.values()), blocked, at.synced_tick,
                               self.config.log_read_bytes_max, at.streams)

    # ---- ending ----------------------------------------------------------------------------------

    def drop(self, at: At, c: ClientConnection, s: Subscription, ended: bool = True) -> list[SubscriberEffect]:
        """Subscription `s` ends (`ended`: unsubscribed, refused, expired), or its connection went
        (a durable one's registration then holds its place in the tree while it is away)."""
        del c.subs[s.sub]
        if not c.subs:
            self.leases.release(c.conn)
        away = False
        out: list[SubscriberEffect] = []
        if self.local.drop(s):
            away, outcome = self.durable.end(s.key, s.registration, ended,
                                             0 if at.streams is None else at.streams.wall_us)
            out += self.outcome(outcome)
            out += self.local.leave(s.key, away, at.streams is not None)
        s.close(away)
        return out

    def unsubscribe(self, at: At, c: ClientConnection, sub: int, forget: bool) -> list[SubscriberEffect]:
        """A durable subscription is away after UNSUBSCRIBE, as after a closed connection, unless
        `forget` ends it for good. One that is not open (the broker ended it, or it never was) is
        left as it is, unanswered: what the client asks for holds already."""
        s = c.subs.get(sub)
        return [] if s is None else self.drop(at, c, s, ended=forget)

    def leases_expired(self, now: int, connections: Mapping[int, ClientConnection]) -> list[LeaseEffect]:
        """Connections that stopped renewing: each of their subscriptions is told, then ends
        (`EndSubscription`, carried out one after the other), away when durable."""
        out: list[LeaseEffect] = []
        for expired in self.leases.handle_timeout(now):
            c = connections.get(expired.conn)
            if c is not None:
                out += lapsed(expired.conn, list(c.subs))
        return out

    def access_changed(self, eff: AccessChanged) -> list[SubscriberEffect]:
        """A tree's access list reached this broker: its subscriptions there that the list does
        not admit end, each with a `forbidden` error to its client, whose refusals are then held."""
        out: list[SubscriberEffect] = []
        for key, error in self.local.trees.excluded(eff.tree, eff.metadata.acl, eff.metadata.creator):
            s = self.local.subends[key]
            out += [Refuse(s.conn, s.sub, error.code, str(error)), EndSubscription(s.conn, s.sub, ended=True),
                    HoldRefusals(s.conn)]
        return out

    # ---- observation -----------------------------------------------------------------------------

    def status(self, at: At, s: Subscription) -> dict[str, Any]:
        return self.local.status(s, self.durable.pubend_id, at.synced_tick, at.streams)
