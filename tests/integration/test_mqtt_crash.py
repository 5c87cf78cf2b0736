"""kill -9 of a broker while an MQTT client publishes at QoS 1 (issue 23): a PUBACK is sent only once
the event is fsynced at its pubend, so every PUBACKed message is in the log after the restart, once."""

import time

import pytest

from tidings import sync
from tidings.testing import BrokerProcess, wait_for

from .mqtt_io import V5, Mqtt

pytestmark = pytest.mark.integration


def test_every_pubacked_message_survives_kill_9(tmp_path):
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        pub = Mqtt(broker.mqtt_address, "crash-pub", V5)
        sent: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        n = 0
        while len(pub.acks) < 300 and time.monotonic() < deadline:
            payload = str(n).encode()
            sent[pub.client.publish("crash/t", payload, 1).mid] = payload
            n += 1
            if n % 100 == 0:
                wait_for(lambda n=n: len(pub.acks) >= n - 150, 15, what="PUBACKs")
        broker.kill()  # with publishes in flight
        acked = {sent[mid] for mid, code in list(pub.acks.items()) if code == 0}
        pub.client.loop_stop()
        assert len(acked) >= 300
        broker.start()
        with sync.connect(broker.address, service="reader") as reader, \
                reader.subscribe("crash/#", start="start") as sub:
            logged: list[bytes] = []
            while not acked <= set(logged):
                logged.append(sub.get(15).payload)
        assert len(logged) == len(set(logged))  # each once
    finally:
        broker.stop()
