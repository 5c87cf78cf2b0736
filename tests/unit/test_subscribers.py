"""The subscriber's side (core/subscription/subscribers.py) on its own: what each call returns, in
order, for the composer to carry out, and what a refusal leaves behind (nothing)."""

from __future__ import annotations

from tidings.core.auth.guard import Guard
from tidings.core.broker.connection import ClientConnection
from tidings.core.config import BrokerConfig
from tidings.core.durable.registrations import Registrations
from tidings.core.durable.subscriptions import DURABLE_SILENCE, DurableSubscriptions, Registered, Resume
from tidings.core.effects import SaveDurable, Send
from tidings.core.errors import TidingsError
from tidings.core.multicast.local_trees import JoinTree, LeaveTree, NameMembers
from tidings.core.subscription.leases import EndSubscription, Leases
from tidings.core.subscription.subscribers import Advance, At, JoinStreams, Refuse, Subscribers
from tidings.core.subscription.table import LeaveStreams, LocalSubscriptions
from tidings.core.wire import decoders, messages

ME = "127.0.0.1:7400"


class Streams:
    """The trees' streams as the side reads them: they know nothing yet."""

    wall_us = 5_000_000

    def delivered_through(self, key: int, tree: str) -> dict[str, int]:
        return {}

    def lag(self, key: int, tree: str) -> dict[str, int]:
        return {}

    def local_flow(self, now: int, key: int, tree: str, blocked: bool) -> list[object]:
        return []


class OpenLists:
    """Scribe's access lists on a cluster without rules: every tree open."""

    def admits(self, tree: str, identity: str, pattern: str) -> bool | None:
        return None

    def creator(self, tree: str) -> str:
        return ""

    def admits_everywhere(self, identity: str) -> bool:
        return True

    def created(self) -> list[tuple[str, str]]:
        return []


def side(registrations_max: int = 8) -> Subscribers:
    config = BrokerConfig()
    guard = Guard.open()
    regs = Registrations(10**9, registrations_max)
    return Subscribers(config, guard, LocalSubscriptions(guard), Leases(config.lease_ns),
                       DurableSubscriptions("p-me", regs))


def connection(conn: int = 1) -> ClientConnection:
    c = ClientConnection(conn, 1 << 20, 10**9, Guard.open())
    c.service, c.identity = "svc", "svc"
    return c


def at(overlay: bool) -> At:
    return At(now=1_000, wall_us=5_000_000, synced_tick=40, released_through=0, me=ME if overlay else None,
              streams=Streams() if overlay else None)


def subscribe(sub: int, pattern: str = "a/#", positions: list[object] | None = None) -> messages.Subscribe:
    return messages.Subscribe(sub, pattern, None, messages.START_NOW, 0, None, positions=positions)


def test_outside_an_overlay_a_subscription_opens_at_once_and_moves_on_after_subscribed():
    subs, c = side(), connection()
    effects = subs.message(at(False), c, subscribe(3))
    assert [type(e) for e in effects] == [Send, Advance]
    s = c.subs[3]
    assert effects[1] == Advance(s) and subs.local.subends == {s.key: s}
    assert subs.leases.expires_at(c.conn) is not None
    reply = decoders.decode_broker_message(effects[0].data[4:])
    assert isinstance(reply, messages.Subscribed) and reply.sub == 3


def test_a_refused_subscribe_opens_nothing():
    subs, c = side(), connection()
    subs.message(at(False), c, subscribe(3))
    effects = subs.message(at(False), c, subscribe(3, "b/#"))  # the same id again
    assert effects == [Refuse(c.conn, 3, "subscription-exists", "subscription 3 already exists")]
    assert list(c.subs) == [3] and len(subs.local.subends) == 1


def test_in_an_overlay_the_join_comes_first_and_a_refused_one_leaves_nothing_behind():
    subs, c = side(), connection()
    assert subs.start(0, OpenLists()) == []
    (join,) = subs.message(at(True), c, subscribe(3))
    assert isinstance(join, JoinStreams) and join.tree == "a/#" and join.then.s is c.subs[3]
    assert [type(e) for e in join.joins] == [JoinTree]  # the broker's first member: it joins the tree
    refusal = subs.join_refused(c, join.then, TidingsError("this node is in 1 trees already", "too-many-trees"))
    assert refusal == Refuse(c.conn, 3, "too-many-trees", "this node is in 1 trees already")
    assert c.subs == {} and subs.local.subends == {} and subs.local.memberships.members == {}
    (again,) = subs.message(at(True), c, subscribe(3))  # nothing of the refused one stands in the way
    assert [type(e) for e in again.joins] == [JoinTree]


def test_a_subscription_that_ends_leaves_its_streams_then_its_tree_and_its_lease_goes():
    subs, c = side(), connection()
    subs.start(0, OpenLists())
    (join,) = subs.message(at(True), c, subscribe(3))
    assert [type(e) for e in subs.opened(at(True), c, join.then)] == [Send, Advance]
    s = c.subs[3]
    effects = subs.message(at(True), c, messages.Unsubscribe(3))
    gone = NameMembers("a/#", ("svc", "a/#"), ())  # its pair is no longer named, then the broker leaves
    assert effects == [Registered([], []), LeaveStreams(s.key, "a/#"), gone, LeaveTree("a/#")]
    assert c.subs == {} and subs.leases.expires_at(c.conn) is None
    assert subs.message(at(True), c, messages.Unsubscribe(3)) == []  # not open: left as it is


def test_a_durable_subscription_is_saved_recorded_and_resumed_before_subscribed_names_it():
    subs, c = side(), connection()
    subs.start(0, OpenLists())
    (join,) = subs.message(at(True), c, subscribe(3, positions=[]))
    effects = subs.opened(at(True), c, join.then)
    assert [type(e) for e in effects] == [SaveDurable, Registered, Resume, Send, Advance]
    assert effects[1].added[0].key == c.subs[3].key and effects[2].registration is None  # a new one
    assert DURABLE_SILENCE in subs.timers


def test_a_durable_subscription_past_the_registrations_limit_ends_again_with_its_refusal():
    subs, c = side(registrations_max=0), connection()
    subs.start(0, OpenLists())
    (join,) = subs.message(at(True), c, subscribe(3, positions=[]))
    s = join.then.s
    effects = subs.opened(at(True), c, join.then)
    assert effects[:2] == [Registered([], []), LeaveStreams(s.key, "a/#")] and effects[3] == LeaveTree("a/#")
    assert isinstance(effects[4], Refuse) and effects[4].sub == 3 and len(effects) == 5
    assert c.subs == {} and subs.local.subends == {}


def test_a_lapsed_lease_tells_each_subscription_then_ends_it_away():
    subs, c = side(), connection()
    subs.message(at(False), c, subscribe(3))
    subs.message(at(False), c, subscribe(4, "b/#"))
    deadline = subs.leases.next_deadline()
    assert deadline is not None
    effects = subs.leases_expired(deadline, {c.conn: c})
    assert [type(e) for e in effects] == [Send, EndSubscription, Send, EndSubscription]
    assert [effects[1], effects[3]] == [EndSubscription(c.conn, sub, ended=False) for sub in (3, 4)]
