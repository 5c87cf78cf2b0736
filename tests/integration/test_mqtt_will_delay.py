"""Will Delay (MQTT 5.0) with paho against a real broker (core/mqtt/will.py): a will waits for its
Will Delay Interval, and is not published when its client id connects again in time."""

import socket
import time

import pytest

from tidings.testing import BrokerProcess, wait_for

from .mqtt_io import V5, Mqtt

pytestmark = pytest.mark.integration

DELAY_S = 5  # the window in which both wills are seen waiting (2 s was missed once in a clean-clone make test)
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
        dropped(late)
        left = time.monotonic()
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
