"""Session Expiry (MQTT 5.0) with paho against a real broker (core/mqtt/expiry.py): a persistent
session whose client is gone ends when its Session Expiry Interval runs out (its durable
subscriptions forgotten), through a kill -9 of its broker too; a reconnect in time keeps it."""

import time
from pathlib import Path

import msgpack
import pytest

from tidings.storage.slots import newest
from tidings.testing import BrokerProcess, wait_for

from .mqtt_io import V5, Mqtt

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
