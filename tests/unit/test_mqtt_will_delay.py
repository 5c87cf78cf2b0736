"""Will Delay (5.0) at one broker (core/mqtt/will.py): a will waits for its Will Delay Interval or
the session's end, whichever is first, and is not published when the client id connects in time."""

from __future__ import annotations

from tidings.core.inputs import ConnectionLost
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.properties import Properties

from .test_mqtt_expiry import held, overlay, tick
from .test_mqtt_gateway import Gate, S


def delayed(g: Gate, conn: int, delay_s: int, expiry_s: int = 3600, client_id: str = "w") -> None:
    """A persistent session with a will delayed by `delay_s` and a subscription; its connection lost."""
    g.connect(conn, client_id=client_id, clean_start=False, properties=Properties(session_expiry_interval_s=expiry_s),
              will=p.Will("wills/w", b"gone", 1, properties=Properties(will_delay_interval_s=delay_s)))
    assert g.send(conn, p.Subscribe(1, (p.TopicFilter("d/#", 1),))) == [p.Suback(1, (1,))]
    g.feed(ConnectionLost(g.now, conn))


def watcher(g: Gate, conn: int = 9) -> None:
    g.connect(conn)
    g.send(conn, p.Subscribe(1, (p.TopicFilter("wills/#", 1),)))


def wills(g: Gate, conn: int = 9) -> list[bytes]:
    if g.h.unsynced:
        g.sync()
    return [m.payload for m in g.answers(conn) if isinstance(m, p.Publish)]


def test_a_will_waits_for_its_delay_and_the_session_stays_away_meanwhile():
    g = overlay()
    watcher(g)
    delayed(g, 1, 5)
    assert wills(g) == [] and g.gw.status()["mqtt"]["wills_waiting"] == 1
    assert [r.key for r in g.h.broker.registrations.all() if r.name] == [None]  # its subscription away
    tick(g, 5 * S - 1000)
    assert wills(g) == []
    tick(g, 1000)
    assert wills(g) == [b"gone"] and g.gw.status()["mqtt"]["wills_published"] == 1
    assert held(g) == ["mqtt:w:1:d/#"]  # the session goes on (an hour)


def test_a_will_goes_at_the_sessions_end_when_that_comes_first():
    g = overlay()
    watcher(g)
    delayed(g, 1, 60, expiry_s=2)
    tick(g, 2 * S)
    assert wills(g) == [b"gone"] and held(g) == []


def test_a_reconnect_in_time_cancels_the_will_and_resumes_the_session():
    g = overlay()
    watcher(g)
    delayed(g, 1, 5)
    tick(g, S)
    [connack] = g.connect(2, client_id="w", clean_start=False, properties=Properties(session_expiry_interval_s=3600))
    assert connack.session_present and g.gw.status()["mqtt"]["wills_waiting"] == 0
    tick(g, 10 * S)
    assert wills(g) == [] and g.gw.status()["mqtt"]["wills_published"] == 0
    g.connect(3)
    g.send(3, p.Publish("d/x", b"for-w", 1, packet_id=1))
    g.sync()
    assert [m.payload for m in g.answers(2) if isinstance(m, p.Publish)] == [b"for-w"]  # resumed on the new one


def test_a_will_without_delay_or_of_a_clean_session_goes_at_once():
    g = overlay()
    watcher(g)
    g.connect(1, client_id="now", will=p.Will("wills/w", b"clean", 1, properties=Properties(will_delay_interval_s=30)))
    g.feed(ConnectionLost(g.now, 1))  # not persistent: the session ends now, and its will goes
    assert wills(g) == [b"clean"]


def test_a_clean_start_in_time_ends_the_old_session_and_its_will_goes_then():
    g = overlay()
    watcher(g)
    delayed(g, 1, 30)
    tick(g, S)
    [connack] = g.connect(2, client_id="w", clean_start=True)
    assert not connack.session_present and wills(g) == [b"gone"] and held(g) == []
