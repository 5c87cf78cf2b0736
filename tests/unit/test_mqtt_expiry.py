"""Session Expiry (5.0) at one broker (core/mqtt/expiry.py, its timer in core/mqtt/gateway.py): a
persistent session away ends when its interval runs out, not after `durable_expiry_ns`; a reconnect
in time keeps it; a DISCONNECT may end it at once; the deadline is saved in `mqtt.state`."""

from __future__ import annotations

import random

import pytest

from tidings.core.inputs import ConnectionLost, TimerFired
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.effects import SESSION_NEVER_EXPIRES
from tidings.core.mqtt.exactly_once import QosTwoKeys
from tidings.core.mqtt.expiry import SessionExpiries
from tidings.core.mqtt.properties import Properties
from tidings.core.publish.dedup import DedupWindow

from .test_mqtt_gateway import Gate, S

US = 1_000_000


def test_deadlines_are_the_end_plus_the_interval_and_read_back_from_their_rows():
    e = SessionExpiries()
    e.left(("svc", "a"), 2, 10 * US)
    e.left(("svc", "b"), SESSION_NEVER_EXPIRES, 10 * US)  # never: no deadline, but known
    e.left(("svc", "c"), 0, 11 * US)
    assert e.next_us() == 11 * US and e.changed
    again = SessionExpiries(e.rows())
    assert not e.changed and again.away == {("svc", "a"): 12 * US, ("svc", "c"): 11 * US}
    assert e.due(11 * US) == [("svc", "c")] and e.due(12 * US - 1) == []
    e.back(("svc", "a"), 2)
    assert e.next_us() is None and e.due(100 * US) == []
    assert SessionExpiries(["junk", [1, 2, 3], ["s", "x", 5], ["s", "y", -1, "z"]]).away == {("s", "x"): 5}


def test_a_session_is_known_connected_away_and_through_a_restart_and_forgotten_by_a_clean_one():
    """Session Present's record (3.2.2.1.2): a persistent session is known while connected, away with
    a deadline or without one; after a restart, those connected at the last save are away from the
    first wall time known; a connection that is not persistent ends it."""
    e = SessionExpiries()
    e.back(("svc", "pub"), 60)  # connected, persistent, no subscription needed
    e.back(("svc", "old"), SESSION_NEVER_EXPIRES)  # 3.1.1 Clean Session 0
    e.left(("svc", "gone"), 5, 10 * US)
    assert all(e.known(("svc", k)) for k in ("pub", "old", "gone")) and not e.known(("svc", "other"))
    again = SessionExpiries(e.rows())  # a kill -9, then the restart
    assert all(again.known(("svc", k)) for k in ("pub", "old", "gone"))
    assert again.next_us() == 15 * US  # (the connected one has no deadline until the wall time is known)
    again.restarted(100 * US)
    assert again.away == {("svc", "gone"): 15 * US, ("svc", "pub"): 160 * US}
    assert again.present == {("svc", "old"): SESSION_NEVER_EXPIRES}
    again.back(("svc", "pub"), None)  # a connection with Clean Start 1 that is not persistent
    again.back(("svc", "old"), None)
    assert not again.known(("svc", "pub")) and not again.known(("svc", "old")) and again.changed


def test_the_deadlines_are_saved_with_the_qos2_keys_and_found_after_a_restart():
    keys = QosTwoKeys(DedupWindow(600 * US, 1000, 100))
    keys.expiries.left(("svc", "a"), 5, 3 * US)
    save = keys.take_save(3 * US)
    assert save is not None
    assert QosTwoKeys(DedupWindow(600 * US, 1000, 100), save.data).expiries.away == {("svc", "a"): 8 * US}
    assert QosTwoKeys(DedupWindow(600 * US, 1000, 100), b"\x93").expiries.away == {}  # undecodable: none


def held(g: Gate) -> list[str]:
    return [r.name[1] for r in g.h.broker.registrations.all() if r.name is not None]


def overlay() -> Gate:
    """A broker in an overlay (a durable subscription needs one)."""
    g = Gate()
    g.h.apply(g.h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    return g


def away_session(g: Gate, interval_s: int, conn: int = 1) -> None:
    g.connect(conn, client_id="brief", clean_start=False, properties=Properties(session_expiry_interval_s=interval_s))
    assert g.send(conn, p.Subscribe(1, (p.TopicFilter("d/#", 1),))) == [p.Suback(1, (1,))]
    assert held(g) == ["mqtt:brief:1:d/#"]


def tick(g: Gate, ns: int) -> None:
    g.now += ns
    g.feed(TimerFired(g.now, 0))


def test_a_session_away_ends_when_its_expiry_interval_runs_out():
    g = overlay()
    away_session(g, 2)
    g.feed(ConnectionLost(g.now, 1))
    assert g.gw.next_deadline() is not None and g.gw.next_deadline() <= g.now + 2 * S
    tick(g, 2 * S - 1000)
    assert held(g) == ["mqtt:brief:1:d/#"]  # not yet
    tick(g, 1000)
    assert held(g) == [] and g.gw.status()["mqtt"]["sessions_expired"] == 1
    [connack] = g.connect(2, client_id="brief", clean_start=False,
                          properties=Properties(session_expiry_interval_s=2))
    assert not connack.session_present


def test_a_reconnect_in_time_keeps_the_session_and_takes_its_deadline_back():
    g = overlay()
    away_session(g, 2)
    g.feed(ConnectionLost(g.now, 1))
    tick(g, S)
    [connack] = g.connect(2, client_id="brief", clean_start=False, properties=Properties(session_expiry_interval_s=2))
    assert connack.session_present and g.gw.status()["mqtt"]["sessions_away"] == 0
    tick(g, 5 * S)
    assert held(g) == ["mqtt:brief:1:d/#"]


@pytest.mark.parametrize(("on_disconnect", "kept"), [(0, False), (3600, True)])
def test_a_disconnect_may_change_the_interval(on_disconnect, kept):
    g = overlay()
    away_session(g, 60)
    g.send(1, p.Disconnect(0, Properties(session_expiry_interval_s=on_disconnect)))
    g.feed(ConnectionLost(g.now, 1))
    tick(g, 61 * S)
    assert (held(g) == ["mqtt:brief:1:d/#"]) is kept


def test_a_3_1_1_session_does_not_expire_here():
    g = overlay()
    g.connect(1, version=4, client_id="old", clean_start=False)
    g.send(1, p.Subscribe(1, (p.TopicFilter("d/#", 1),)))
    g.feed(ConnectionLost(g.now, 1))
    assert g.gw.status()["mqtt"]["sessions_away"] == 0
    tick(g, 3600 * S)
    assert held(g) == ["mqtt:old:1:d/#"]


def test_the_deadline_outlives_a_restart():
    g = overlay()
    away_session(g, 2)
    g.feed(ConnectionLost(g.now, 1))
    g.save_done()
    g2 = Gate(saved_state=g.saved_state)
    assert g2.gw.status()["mqtt"]["sessions_away"] == 1
    g2.now = 10
    g2.feed(TimerFired(g2.now, g.h.wall_us + 3 * US))  # the first wall time known: past the deadline
    tick(g2, 1)
    assert g2.gw.status()["mqtt"]["sessions_away"] == 0 and g2.gw.status()["mqtt"]["sessions_expired"] == 1
