"""A run of deliveries in one call (`MqttConnection.deliver_many`, used by the session for a run of
EVENTS) sends what `deliver` one by one sends, in the same order, with the same outcomes: the
client's window, the queue's bound and QoS 0 between QoS 1 ones included."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.mqtt import effects as fx
from tidings.core.mqtt.limits import ProtocolLimits
from tidings.core.mqtt.packet_type import MQTT_5, MQTT_311
from tidings.core.mqtt.packets import Puback, Publish
from tidings.core.mqtt.properties import Properties

from .test_mqtt_protocol import Wire

RUNS = st.lists(st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=12), min_size=1, max_size=4)


def wire(version: int, window: int, queued_max: int) -> Wire:
    w = Wire(version, ProtocolLimits(deliveries_queued_max=queued_max))
    w.connect(properties=Properties(receive_maximum=window) if version == MQTT_5 else Properties())
    return w


def split(effects: list[fx.MqttEffect]) -> tuple[bytes, list[fx.MqttEffect]]:
    return (b"".join(e.data for e in effects if isinstance(e, fx.Send)),
            [e for e in effects if not isinstance(e, fx.Send)])


@settings(max_examples=60, deadline=None)
@given(runs=RUNS, window=st.integers(1, 4), queued_max=st.integers(1, 6), version=st.sampled_from([MQTT_5, MQTT_311]))
def test_a_run_in_one_call_is_the_run_one_by_one(runs, window, queued_max, version):
    one, many = wire(version, window, queued_max), wire(version, window, queued_max)
    token = 0
    for run in runs:
        items = []
        for qos in run:
            token += 1
            items.append((token, Publish(f"t/{token % 3}", b"%d" % token, qos, properties=Properties(
                content_type="text/plain" if version == MQTT_5 else None))))
        singly = [e for t, m in items for e in one.m.deliver(t, m.topic, m.payload, m.qos, properties=m.properties)]
        assert split(many.m.deliver_many(items)) == split(singly)
        acks = one.packets(singly)  # the client acknowledges the first QoS 1 delivery of the run, if any
        first = next((m for m in acks if isinstance(m, Publish) and m.qos == 1), None)
        if first is not None:
            assert split(one.send(Puback(first.packet_id))) == split(many.send(Puback(first.packet_id)))
