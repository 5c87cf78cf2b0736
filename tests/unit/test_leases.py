"""Leases on subscriptions: a client that stops renewing loses its subscriptions, everywhere."""

import msgpack

from tests.unit.core_harness import Harness, delivered, of_type
from tidings.core.config import BrokerConfig
from tidings.core.effects import Send
from tidings.core.session.client_session import ClientSession
from tidings.core.subscription.leases import EndSubscription, LeaseExpired, Leases, lapsed
from tidings.core.wire import messages
from tidings.core.wire.frames import frame
from tidings.core.wire.types import ClientType

SECOND = 1_000_000_000


def test_a_lease_runs_from_the_last_renewal_and_ends_once():
    leases = Leases(10)
    assert not leases.renew(0, 1) and leases.next_deadline() is None  # nothing held, nothing renewed
    leases.hold(0, 1)
    leases.hold(5, 2)
    assert leases.renew(8, 1) and leases.expires_at(1) == 18
    assert leases.handle_timeout(14) == []
    assert leases.handle_timeout(15) == [LeaseExpired(2)] and leases.handle_timeout(100) == [LeaseExpired(1)]
    assert len(leases) == 0 and leases.expired_total == 2
    leases.hold(0, 3)
    leases.release(3)
    assert leases.handle_timeout(100) == [] and leases.next_deadline() is None


def test_a_lease_of_a_connection_not_read_runs_on():
    unread = {1}
    leases = Leases(10, unread.__contains__)
    leases.hold(0, 1)
    assert leases.handle_timeout(10) == [] and leases.expires_at(1) == 20  # its RENEWs wait unread
    unread.clear()
    assert leases.handle_timeout(20) == [LeaseExpired(1)] and leases.expired_total == 1


def test_a_lapsed_lease_tells_each_subscription_why_then_ends_it():
    effects = lapsed(1, [7, 8])
    assert [type(e) for e in effects] == [Send, EndSubscription, Send, EndSubscription]
    assert [e for e in effects if isinstance(e, EndSubscription)] == [EndSubscription(1, 7, ended=False),
                                                                      EndSubscription(1, 8, ended=False)]
    first = effects[0]
    assert isinstance(first, Send) and first.conn == 1
    error = messages.decode_broker_message(first.data[4:])
    assert isinstance(error, messages.Error) and error.code == "lease-expired" and error.context["sub"] == 7
    assert lapsed(2, []) == []


def test_the_broker_grants_a_lease_and_the_session_renews_at_a_third():
    h = Harness(BrokerConfig(lease_ns=3 * SECOND))
    h.connect(1)
    welcome = of_type(h.inbox(1), messages.Welcome)[0]
    assert welcome.info["lease_ns"] == 3 * SECOND
    assert h.sessions[1].lease_ns == 3 * SECOND and h.sessions[1].renew_interval_ns == SECOND
    assert ClientSession("x", "y").renew_interval_ns is None  # before WELCOME: no lease known


def test_a_subscription_not_renewed_ends_with_an_error_and_the_connection_goes_on():
    h = Harness(BrokerConfig(lease_ns=3 * SECOND))
    h.connect(1)
    h.connect(2)
    sub = h.subscribe(1, "a/#")
    renewed = h.subscribe(2, "a/#")
    h.inbox(1), h.inbox(2)
    assert h.broker.next_deadline() == 3 * SECOND
    for now in (1 * SECOND, 2 * SECOND, 3 * SECOND):  # connection 2 renews, connection 1 is silent
        h.now = now
        h.send(2, h.sessions[2].renew())
        h.timer(now)
    errors = of_type(h.inbox(1), messages.Error)
    assert [(e.code, e.context.get("sub")) for e in errors] == [("lease-expired", sub)]
    status = h.broker.status()
    assert status["subscriptions"] == 1 and status["leases_held"] == 1 and status["leases_expired"] == 1
    assert len(h.broker.index) == 1
    h.publish(1, ("a/b", b"x", {}))  # the expired client may still publish, and subscribe again
    h.sync()
    assert delivered(h.inbox(2)) and not delivered(h.inbox(1))
    h.timer(4 * SECOND)
    assert of_type(h.inbox(2), messages.Error) == [] and h.broker.status()["subscriptions"] == 1
    h.subscribe(1, "a/#")
    assert of_type(h.inbox(1), messages.Subscribed) and h.broker.status()["leases_held"] == 2
    assert renewed


def test_without_subscriptions_a_connection_holds_no_lease():
    h = Harness(BrokerConfig(lease_ns=SECOND))
    h.connect(1)
    h.send(1, h.sessions[1].renew())  # a RENEW without subscriptions is harmless
    sub = h.subscribe(1, "a")
    assert h.broker.status()["leases_held"] == 1
    h.send(1, messages.unsubscribe(sub))
    assert h.broker.status()["leases_held"] == 0 and h.broker.next_deadline() is None
    h.subscribe(1, "b")
    h.lost(1)
    assert h.broker.status()["leases_held"] == 0


def test_renew_with_fields_is_a_protocol_error_for_that_frame_only():
    h = Harness()
    h.connect(1)
    h.inbox(1)
    h.send(1, frame(msgpack.packb([ClientType.RENEW, 1])))
    assert of_type(h.inbox(1), messages.Error)[0].code == "bad-message"
    h.subscribe(1, "a")
    assert of_type(h.inbox(1), messages.Subscribed)
