"""A connection's will, when its connection ended (core/mqtt/session.py's, for the gateway)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidings.core.mqtt import bridge
from tidings.core.mqtt import packets as p

if TYPE_CHECKING:
    from tidings.core.mqtt.session import MqttSession


def will_frame(session: MqttSession) -> bytes | None:
    """The connection ended: its will, as the PUBLISH frame the broker logs and delivers (the same
    checks and rules as any PUBLISH of the client's), when the machine said it is due."""
    will, native = session.will, session.native
    if will is None or native is None or not session.will_due or not session.welcomed:
        return None
    session.will = None
    retain = will.retain and session.retained is not None and session.retained.available
    event = bridge.event_of(native, p.Publish(will.topic, will.payload, will.qos, retain, properties=will.properties))
    return None if isinstance(event, bridge.Refused) else native.publish([event])[0][2]
