"""The MQTT gateway's figures: under `mqtt` in the broker's status, and as /metrics writes them
(`tidings_mqtt_*`: aio/http.py; docs/operations.md), with each connection's line in the status."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidings.core.broker.metrics import COUNTER, GAUGE, Figure
from tidings.core.mqtt.bridge import MQTT_5
from tidings.core.share import gateway as shares

if TYPE_CHECKING:
    from tidings.core.mqtt.session import MqttSession

MQTT = ("mqtt",)

FIGURES: tuple[Figure, ...] = (
    Figure("connections", "mqtt_connections", GAUGE, "MQTT connections open (CONNACK sent)", "MqttGateway",
           under=MQTT),
    Figure("connections_accepted", "mqtt_connections_accepted", COUNTER, "connections accepted on the MQTT ports",
           "MqttGateway", under=MQTT),
    Figure("packets_received", "mqtt_packets_received", COUNTER, "MQTT packets received", "MqttSession", under=MQTT),
    Figure("packets_sent", "mqtt_packets_sent", COUNTER, "MQTT packets sent", "MqttSession", under=MQTT),
    Figure("publishes_received", "mqtt_publishes_received", COUNTER,
           "MQTT PUBLISHes handed to the intake (an event each)", "MqttSession", under=MQTT),
    Figure("publishes_delivered", "mqtt_publishes_delivered", COUNTER, "events delivered to MQTT subscribers",
           "MqttSession", under=MQTT),
    Figure("refusals", "mqtt_refusals", COUNTER,
           "MQTT connections, publishes and packets refused (with a reason code, or a close)", "MqttSession",
           under=MQTT),
    Figure("wills_published", "mqtt_wills_published", COUNTER,
           "will messages published for connections that ended without DISCONNECT", "MqttGateway", under=MQTT),
    Figure("derivations_refused", "mqtt_derivations_refused", COUNTER,
           "CONNECTs refused past the bounds on password derivations in flight (0x9F)", "Derivations", under=MQTT),
    Figure("deliveries_dropped", "mqtt_deliveries_dropped", COUNTER,
           "deliveries over a client's Maximum Packet Size, not sent", "MqttSession", under=MQTT),
    Figure("retained_topics", "mqtt_retained_topics", GAUGE, "topics with a retained message held by this broker",
           "RetainedStore", under=MQTT),
    Figure("retained_bytes", "mqtt_retained_bytes", GAUGE, "bytes of the retained messages held", "RetainedStore",
           under=MQTT),
    Figure("retained_dropped", "mqtt_retained_dropped", COUNTER,
           "retained messages not kept: past the topics or bytes held", "RetainedStore", under=MQTT),
    Figure("qos2_keys_held", "mqtt_qos2_keys_held", GAUGE,
           "persistent sessions' QoS 2 PUBLISHes from their first copy to their PUBREL", "QosTwoKeys", under=MQTT),
    Figure("qos2_saves", "mqtt_qos2_saves", COUNTER, "saves of those keys, each before the PUBCOMPs it carries",
           "QosTwoKeys", under=MQTT),
    *shares.FIGURES,
)



def figures_of(session: MqttSession) -> dict[str, int]:
    return {"packets_received": session.received, "packets_sent": session.sent,
            "publishes_received": session.published, "publishes_delivered": session.subscriptions.delivered,
            "refusals": session.refused, "deliveries_dropped": session.dropped}


def status_of(session: MqttSession) -> dict[str, object]:
    """One MQTT connection in the broker's status (the gateway's `sessions`)."""
    s = session
    return {**s.machine.status(), "conn": s.conn, "client_id": s.client_id, "identity": s.identity,
            "state": str(s.state), "version": "5.0" if s.level == MQTT_5 else "3.1.1", "persistent": s.persistent,
            "subscriptions": len(s.subscriptions.subs), "received": s.received, "sent": s.sent}
