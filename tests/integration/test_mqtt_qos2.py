"""QoS 2 from MQTT clients through a kill -9 of their broker (issue 23; core/mqtt/exactly_once.py):
paho 3.1.1 and 5.0 publish at QoS 2 in a persistent session with a full window of PUBLISHes in
flight, the broker is killed, started again, and the same paho client reconnects and resends what it
had in flight (a PUBLISH with DUP under its packet identifier where no PUBREC came, a PUBREL where one
did), then publishes more under the same identifiers: every message is in the log exactly once, and
every flow ends with its PUBCOMP."""

import queue
import time

import pytest

from tidings import sync
from tidings.testing import BrokerProcess, wait_for

from .mqtt_io import V5, V311, Mqtt

pytestmark = pytest.mark.integration

BEFORE_KILL = 600  # messages published before the kill, the last IN_FLIGHT of them in flight
AFTER = 300  # published after the restart
IN_FLIGHT = 64  # paho's window, our Receive Maximum


def publish_within_the_window(pub: Mqtt, sent: dict[int, bytes], upto: int) -> None:
    """QoS 2 PUBLISHes until `upto` were sent, never more than IN_FLIGHT unfinished: paho 2.2 sends
    every unfinished one at once after a reconnect, over its own window and our Receive Maximum
    (0x93), so the test keeps them within it."""
    while len(sent) < upto:
        wait_for(lambda: len(sent) - len(pub.acks) < IN_FLIGHT, 30, what="room in the window")
        payload = str(len(sent)).encode()
        sent[pub.client.publish("q2/t", payload, 2).mid] = payload


@pytest.mark.parametrize("version", [V311, V5])
def test_qos2_publishes_through_kill_9_are_logged_exactly_once(tmp_path, version):
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        pub = Mqtt(broker.mqtt_address, "q2-pub", version, clean=False, in_flight=IN_FLIGHT)
        # paho tries no reconnect while the broker is down: each attempt resets its flows again, and
        # paho 2.2's reset run twice turns a flow awaiting PUBCOMP into a new PUBLISH (DUP 0) of a
        # message it released, which any broker must log again (docs/mqtt.md); `reconnect` below is one
        pub.client.reconnect_delay_set(min_delay=120, max_delay=120)
        sent: dict[int, bytes] = {}
        publish_within_the_window(pub, sent, BEFORE_KILL)
        broker.kill()  # with up to IN_FLIGHT QoS 2 flows open
        open_at_kill = len(sent) - len(pub.acks)
        assert open_at_kill > 0, "every flow completed before the kill: nothing was tested"
        broker.start()
        pub.reconnect(broker.mqtt_address)
        wait_for(lambda: len(pub.acks) == len(sent), 30, what="every QoS 2 flow completed after the restart")
        publish_within_the_window(pub, sent, BEFORE_KILL + AFTER)  # the identifiers again: new messages
        wait_for(lambda: len(pub.acks) == len(sent), 30, what="every QoS 2 flow completed")
        assert set(pub.acks) == set(sent)
        with sync.connect(broker.address, service="reader") as reader:
            reader.publish("q2/t", b"end")  # after every MQTT message in the log
            with reader.subscribe("q2/#", start="start") as sub:
                logged: list[bytes] = []
                deadline = time.monotonic() + 60
                while (not logged or logged[-1] != b"end") and time.monotonic() < deadline:
                    logged.append(sub.get(15).payload)
        assert logged.pop() == b"end"
        twice = sorted({m for m in logged if logged.count(m) > 1}, key=int)
        assert not twice, f"{len(twice)} of {open_at_kill} messages open at the kill logged twice: {twice[:10]}"
        assert sorted(logged, key=int) == sorted(sent.values(), key=int)  # none lost
        pub.close()
    finally:
        broker.stop()


@pytest.mark.parametrize("version", [V311, V5])
def test_qos2_to_a_subscriber_at_the_minimum_of_both_qos(tmp_path, version):
    """A clean session granted QoS 2 gets a QoS 2 message at QoS 2 (paho answers PUBREC, PUBCOMP), a
    QoS 1 one and a native event at QoS 1, each once."""
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        sub = Mqtt(broker.mqtt_address, "q2-sub", version)
        assert sub.subscribe("q2s/#", qos=2) == [2]
        pub = Mqtt(broker.mqtt_address, "q2-pub", version)
        for i in range(20):
            pub.client.publish("q2s/two", f"two{i}".encode(), 2)
        assert pub.publish("q2s/one", b"one", 1) == 0
        with sync.connect(broker.address, service="native") as native:
            native.publish("q2s/native", b"native")
        got = [sub.get() for _ in range(22)]
        assert sorted((m.payload, m.qos) for m in got) == sorted(
            [(f"two{i}".encode(), 2) for i in range(20)] + [(b"one", 1), (b"native", 1)])
        with pytest.raises(queue.Empty):
            sub.get(0.5)  # nothing twice
        sub.close()
        pub.close()
    finally:
        broker.stop()
