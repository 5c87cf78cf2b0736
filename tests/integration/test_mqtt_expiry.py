"""Session Expiry (MQTT 5.0) with paho against a real broker (core/mqtt/expiry.py): a persistent
session whose client is gone ends when its Session Expiry Interval runs out (its durable
subscriptions forgotten), through a kill -9 of its broker too; a reconnect in time keeps it."""

import time
from pathlib import Path

import msgpack
import pytest

from tidings.storage.slots import newest
from tidings.testing import BrokerProcess, wait_for

from .mqtt_io import V5, V311, Mqtt

pytestmark = pytest.mark.integration

EXPIRY_S = 2
GONE_S_MAX = 20.0  # the session's end is looked for this long after its interval


def named(broker: BrokerProcess) -> list[str]:
    return [entry["name"] for entry in broker.status().get("durable_named", [])]


def session_of(broker: BrokerProcess, client_id: str) -> Mqtt:
    client = Mqtt(broker.mqtt_address, client_id, V5, clean=False, session_expiry_s=EXPIRY_S)
    if not client.session_present:
        assert client.subscribe("exp/#", qos=1) == [1]
    return client


def test_a_session_away_ends_when_its_interval_runs_out_and_a_reconnect_in_time_keeps_it(tmp_path):
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        session_of(broker, "brief").close()
        left = time.monotonic()
        assert named(broker) == ["mqtt:brief:1:exp/#"]  # held while the interval runs
        back = session_of(broker, "brief")  # in time: the session is still there
        assert back.session_present is True and time.monotonic() - left < EXPIRY_S
        back.close()
        left = time.monotonic()
        wait_for(lambda: named(broker) == [], EXPIRY_S + GONE_S_MAX, what="the session's end")
        assert time.monotonic() - left >= EXPIRY_S * 0.9  # not before its interval (0.9: the clocks' grain)
        again = session_of(broker, "brief")
        assert again.session_present is False
        again.close()
    finally:
        broker.stop()


def expiries_saved(state: Path) -> list[object]:
    """The session expiries in the broker's saved `mqtt.state` (core/mqtt/exactly_once.py)."""
    saved = newest(state)
    if saved is None:
        return []
    value = msgpack.unpackb(saved, strict_map_key=False)
    return value[2] if len(value) > 2 else []


def test_a_sessions_expiry_outlives_a_kill_9_of_its_broker(tmp_path):
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        session_of(broker, "brief").close()
        wait_for(lambda: [row[1] for row in expiries_saved(tmp_path / "b" / "mqtt.state")] == ["brief"], 10,
                 what="the session's deadline saved")
        broker.kill()
        broker.start()
        assert named(broker) == ["mqtt:brief:1:exp/#"] or named(broker) == []  # (it may be over already)
        wait_for(lambda: named(broker) == [], EXPIRY_S + GONE_S_MAX, what="the session's end after the restart")
        again = session_of(broker, "brief")
        assert again.session_present is False
        again.close()
    finally:
        broker.stop()


@pytest.mark.parametrize("version", [V311, V5])
def test_a_persistent_session_without_subscriptions_is_present_after_a_reconnect_and_a_kill_9(tmp_path, version):
    """A publisher's persistent session holds no subscription, but it is a session (3.2.2.1.2: a client
    told Session Present 0 discards its own state, its QoS 1 and 2 PUBLISHes not yet answered): Session
    Present 1 after a reconnect and after a kill -9 of the broker; 0 after a Clean Start ended it."""
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        first = Mqtt(broker.mqtt_address, "pub-only", version, clean=False)
        assert first.session_present is False
        first.close()
        again = Mqtt(broker.mqtt_address, "pub-only", version, clean=False)
        assert again.session_present is True
        wait_for(lambda: [row[1] for row in expiries_saved(tmp_path / "b" / "mqtt.state")] == ["pub-only"], 10,
                 what="the session saved while connected")
        broker.kill()
        again.client.loop_stop()
        broker.start()
        after = Mqtt(broker.mqtt_address, "pub-only", version, clean=False)
        assert after.session_present is True
        after.close()
        Mqtt(broker.mqtt_address, "pub-only", version, clean=True).close()
        fresh = Mqtt(broker.mqtt_address, "pub-only", version, clean=False)
        assert fresh.session_present is False
        fresh.close()
    finally:
        broker.stop()
