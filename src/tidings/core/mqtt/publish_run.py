"""A client's PUBLISHes read as a run: one pass over the bytes, one fact for the broker side.

Theory of operation. A publisher sends PUBLISH after PUBLISH; reading each as a `Publish` packet and
reporting it as a `Published` fact costs two objects and a round of dispatch per message, most of an
MQTT event's cost at the broker (docs/mqtt.md "How it works"). So a connection whose broker side
takes runs (`MqttConnection(runs=True)`, core/mqtt/session.py's) reads the PUBLISH packets at the
head of what arrived in one pass (core/mqtt/codec.py `take_publishes`: their fields, every rule of
the codec checked) and reports the plain ones together in one `PublishedRun`. A plain PUBLISH is one
the protocol machine would report as it is: no properties (so no Topic Alias, no Subscription
Identifier), QoS 0, or QoS 1 within the machine's Maximum QoS under a packet identifier not in use
and within our Receive Maximum (a new receipt), retained only where retain is available. Any other
PUBLISH goes through the machine's own rules (`MqttConnection._publish`), after the run so far is
reported, so the facts keep the packets' order; a PUBLISH that ends the connection ends the run.
A subscriber's PUBACKs come in runs too (a QoS 1 subscriber answers a run of deliveries): a run of
four-byte PUBACKs is read as their packet identifiers alone (`take_pubacks`) and each ends its
delivery as the machine's `_packet` does with a `Puback`, the window refilled once for the run. Nothing
differs from reading the same bytes packet by packet but the shape of the facts and how the bytes
sent are cut into Sends (tests/unit/test_mqtt_publish_run.py holds the two equal, by Hypothesis).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidings.core.mqtt import effects as fx
from tidings.core.mqtt.packets import Publish
from tidings.core.mqtt.properties import NO_PROPERTIES

if TYPE_CHECKING:
    from tidings.core.mqtt.protocol import MqttConnection


def take_run(machine: MqttConnection, out: list[fx.MqttEffect]) -> bool:
    """The PUBLISHes (or else the PUBACKs) at the head of `machine`'s decoder, their facts into
    `out`; whether to look again: False if there were none, or if nothing is left held (the
    machine's pump then stops at once: nothing to pull, no refusal), True if they closed the
    connection."""
    decoder = machine.decoder
    fields = decoder.take_publishes()
    if not fields:
        acks = decoder.take_pubacks()
        if acks:  # (as `_packet` does with each: the flow's PUBACK; the window refilled once)
            out += machine.flow.acked_many(acks)
        return bool(acks) and decoder.held_bytes > 0
    limits = machine.limits
    qos_max = min(1, limits.maximum_qos)
    retain_ok = limits.retain_available
    receipts = machine.receipts
    held = receipts.open
    items: list[fx.PlainPublish] = []
    for topic, payload, qos, retain, dup, pid, props in fields:
        if props is NO_PROPERTIES and qos <= qos_max and (retain_ok or not retain):
            if pid is None:
                items.append((topic, payload, qos, retain, None))
                continue
            if pid not in held and len(held) < receipts.maximum:
                receipts.arrive(pid, qos)  # (new: the same receipt `_publish` opens)
                items.append((topic, payload, qos, retain, pid))
                continue
        if items:
            out.append(fx.PublishedRun(items))
            items = []
        machine._publish(Publish(topic, payload, qos, retain, dup, pid, props), out)
        if out and type(out[-1]) is fx.Close:  # (it ended the connection: what followed it is dropped)
            return True
    if items:
        out.append(fx.PublishedRun(items))
    return decoder.held_bytes > 0
