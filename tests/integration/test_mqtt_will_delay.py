"""Will Delay (MQTT 5.0) with paho against a real broker (core/mqtt/will.py): a will waits for its
Will Delay Interval, and is not published when its client id connects again in time, through a
kill -9 of the broker too (core/mqtt/will_saved.py)."""

import socket
import time
from pathlib import Path

import msgpack
import pytest

from tidings.storage.slots import newest
from tidings.testing import BrokerProcess, wait_for

from .mqtt_io import V5, Mqtt

pytestmark = pytest.mark.integration

DELAY_S = 5  # the window in which both wills are seen waiting (2 s was missed once in a clean-clone make test)
RESTART_DELAY_S = 10  # the same window, across a kill -9 and a restart of the broker
WAIT_S = 20.0


def dropped(client: Mqtt) -> None:
    """The client's connection ends without DISCONNECT (its will is due)."""
    sock = client.client.socket()
    assert sock is not None
    sock.shutdown(socket.SHUT_RDWR)
    client.client.loop_stop()


def test_a_delayed_will_goes_after_its_delay_and_one_is_cancelled_by_a_reconnect(tmp_path):
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    watcher = Mqtt(broker.mqtt_address, "watcher", V5)
    try:
        assert watcher.subscribe("wills/#", qos=1) == [1]
        late = Mqtt(broker.mqtt_address, "late", V5, clean=False, will=("wills/late", b"late gone", DELAY_S))
        back = Mqtt(broker.mqtt_address, "back", V5, clean=False, will=("wills/back", b"never", DELAY_S))
        dropped(back)
        left = time.monotonic()  # (before the drop it times: paho's loop_stop may take a second, which
        dropped(late)  # measured after it made the will look a second early; it failed so once)
        wait_for(lambda: broker.status()["mqtt"]["wills_waiting"] == 2, 10, what="both wills waiting")
        again = Mqtt(broker.mqtt_address, "back", V5, clean=False)  # in time: its will is not published
        assert time.monotonic() - left < DELAY_S
        message = watcher.get(WAIT_S)
        assert (message.topic, message.payload) == ("wills/late", b"late gone")
        assert time.monotonic() - left >= DELAY_S * 0.9  # not before its delay (0.9: the clocks' grain)
        wait_for(lambda: broker.status()["mqtt"]["wills_waiting"] == 0, 10, what="no will waiting")
        assert broker.status()["mqtt"]["wills_published"] == 1  # the cancelled one never went
        assert watcher.messages.empty()
        again.close()
    finally:
        watcher.close()
        broker.stop()


def wills_saved(state: Path) -> list[str]:
    """The client ids whose wills wait in the broker's saved `mqtt.state` (core/mqtt/will_saved.py)."""
    saved = newest(state)
    if saved is None:
        return []
    value = msgpack.unpackb(saved, strict_map_key=False)
    return sorted(row[1] for row in value[4]) if len(value) > 4 else []


def test_delayed_wills_survive_a_kill_9_of_their_broker(tmp_path):
    """Three wills wait when their broker is killed -9; after the restart the one whose client id
    comes back in time is cancelled, the one that comes back with Clean Start goes at once, and the
    third goes when its delay runs out (published by the broker's own connection for the client's
    identity), each once."""
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    watcher = Mqtt(broker.mqtt_address, "watcher", V5, clean=False)
    try:
        assert watcher.subscribe("wills/#", qos=1) == [1]
        clients = [Mqtt(broker.mqtt_address, name, V5, clean=False,
                        will=(f"wills/{name}", name.encode(), RESTART_DELAY_S)) for name in ("back", "fresh", "gone")]
        for client in clients[:2]:
            dropped(client)
        left = time.monotonic()  # (before the last drop: paho's loop_stop may take a second)
        dropped(clients[2])
        wait_for(lambda: wills_saved(tmp_path / "b" / "mqtt.state") == ["back", "fresh", "gone"], 10,
                 what="the three wills saved")
        broker.kill()
        watcher.close()
        broker.start()
        back = Mqtt(broker.mqtt_address, "back", V5, clean=False)  # in time: its will is cancelled
        fresh = Mqtt(broker.mqtt_address, "fresh", V5, clean=True)  # a clean start: its will goes now
        assert time.monotonic() - left < RESTART_DELAY_S
        wait_for(lambda: broker.status()["mqtt"]["wills_published"] == 1, 10, what="the clean start's will")
        assert time.monotonic() - left < RESTART_DELAY_S  # (the other not yet)
        watcher = Mqtt(broker.mqtt_address, "watcher", V5, clean=False)
        first = watcher.get(WAIT_S)
        assert (first.topic, first.payload) == ("wills/fresh", b"fresh")
        second = watcher.get(WAIT_S)
        assert (second.topic, second.payload) == ("wills/gone", b"gone")
        assert time.monotonic() - left >= RESTART_DELAY_S * 0.9  # not before its delay (0.9: the clocks' grain)
        wait_for(lambda: broker.status()["mqtt"]["wills_saved"] == 0, 10, what="no will kept")
        assert broker.status()["mqtt"]["wills_published"] == 2  # the cancelled one never went
        assert wills_saved(tmp_path / "b" / "mqtt.state") == []
        assert watcher.messages.empty()
        back.close()
        fresh.close()
    finally:
        watcher.close()
        broker.stop()


def test_a_takeover_within_the_will_delay_cancels_the_old_connections_will(tmp_path):
    """A connection still open (its will delayed) is taken over by a new one of the same client id
    (3.1.4): the old one ended without DISCONNECT, so its will waits, and the new connection, open
    well within the delay, cancels it (3.1.3.2.2): it is never published. The session's subscription
    goes on on the new connection."""
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    watcher = Mqtt(broker.mqtt_address, "watcher", V5)
    try:
        assert watcher.subscribe("wills/#", qos=1) == [1]
        old = Mqtt(broker.mqtt_address, "twice", V5, clean=False, will=("wills/twice", b"never", DELAY_S))
        assert old.subscribe("tk/#", qos=1) == [1]
        new = Mqtt(broker.mqtt_address, "twice", V5, clean=False)  # the old connection still open
        wait_for(lambda: broker.status()["mqtt"]["connections"] == 2, 10, what="the old connection closed")
        watcher.publish("tk/x", b"to the new one")
        message = new.get(WAIT_S)
        assert (message.topic, message.payload) == ("tk/x", b"to the new one")
        wait_for(lambda: broker.status()["mqtt"]["wills_waiting"] == 0, 10, what="no will waiting")
        assert broker.status()["mqtt"]["wills_published"] == 0
        new.close()
        old.close()
    finally:
        watcher.close()
        broker.stop()
