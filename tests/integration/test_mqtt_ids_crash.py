"""A persistent session's deliveries in flight come again under their packet identifiers, with DUP
(or as their PUBREL), after a kill -9 of its broker (MQTT 4.4; core/mqtt/inflight_ids.py): a raw
client of our codec, 3.1.1 and 5.0, against a real broker killed -9 and restarted."""

import pytest

from tidings import sync
from tidings.core.mqtt import packets as p
from tidings.testing import BrokerProcess, wait_for

from .mqtt_raw import WAIT_S, Raw, qos2_held, qos2_resumed

pytestmark = pytest.mark.integration


def publish_native(broker: BrokerProcess, topic: str, payload: bytes) -> None:
    with sync.connect(broker.address, service="native") as native:
        native.publish(topic, payload)


@pytest.mark.parametrize("version", [4, 5])
def test_qos2_flows_resume_under_their_packet_ids_through_kill_9(tmp_path, version):
    """One delivery past PUBREC (PUBREL sent), one unanswered, when the broker is killed -9: after the
    restart the reconnecting session gets PUBREL and PUBLISH with DUP under the same identifiers, and
    neither message as a new one."""
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        sub, pub, a, b = qos2_held(broker, version, "ik")
        broker.kill()
        sub.close()
        pub.close()
        broker.start()
        qos2_resumed(broker, version, "ik", a, b)
    finally:
        broker.stop()


@pytest.mark.parametrize("version", [4, 5])
def test_qos1_deliveries_come_again_with_dup_under_their_ids_through_kill_9(tmp_path, version):
    """Three QoS 1 deliveries, the first acknowledged; once their identifiers are saved (within
    IDS_SAVE_INTERVAL_NS: nothing waits for it at QoS 1) the broker is killed -9: after the restart the
    two unacknowledged come with DUP under their identifiers (the first may come again as a new
    message: its acknowledgement is saved with the durable position, `durable_save_interval_ns`)."""
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        sub = Raw(broker.mqtt_address, version, "ids-q1")
        sub.send(p.Subscribe(1, (p.TopicFilter("iq/#", 1),)))
        assert sub.expect(1) == [p.Suback(1, (1,))]
        for i in range(3):
            publish_native(broker, "iq/x", f"m{i}".encode())
        first = sub.expect(3)
        assert [m.payload for m in first] == [b"m0", b"m1", b"m2"]  # type: ignore[union-attr]
        sub.send(p.Puback(first[0].packet_id))  # type: ignore[union-attr]
        wait_for(lambda: broker.status()["mqtt"]["ids_saved_records"] == 2, WAIT_S,
                 what="the two unacknowledged deliveries' packet ids saved")
        broker.kill()
        sub.close()
        broker.start()
        sub = Raw(broker.mqtt_address, version, "ids-q1")
        again = sub.expect(2)
        if again[0].payload == b"m0":  # type: ignore[union-attr]
            assert not again[0].dup  # type: ignore[union-attr]
            sub.send(p.Puback(again[0].packet_id))  # type: ignore[union-attr]
            again = again[1:] + sub.expect(1)
        assert again == [p.Publish("iq/x", b"m1", 1, False, True, first[1].packet_id),  # type: ignore[union-attr]
                         p.Publish("iq/x", b"m2", 1, False, True, first[2].packet_id)]  # type: ignore[union-attr]
        sub.send(*(p.Puback(m.packet_id) for m in again))  # type: ignore[union-attr]
        publish_native(broker, "iq/end", b"end")
        [end] = sub.expect(1)
        if end.payload == b"m0":  # type: ignore[union-attr]  # (again as a new message, after the resent ones
            assert not end.dup  # type: ignore[union-attr]  # of its batch: inflight_ids.resume_saved)
            sub.send(p.Puback(end.packet_id))  # type: ignore[union-attr]
            [end] = sub.expect(1)
        assert isinstance(end, p.Publish) and end.payload == b"end" and not end.dup
        sub.close()
    finally:
        broker.stop()
