"""One MQTT connection's shared subscriptions (`$share/GROUP/FILTER`), for its session
(core/mqtt/session.py): the SUBSCRIBE and UNSUBSCRIBE codes of its shared filters, its deliveries'
PUBLISHes, and their acknowledgements to the group's home (core/share/hub.py).

A SUBSCRIBE's shared filters are the hub's (the connection joins the group: 0x00 granted at
min(QoS, 1), or a refusal code); its other filters are the connection's subscriptions'
(core/mqtt/subscriptions.py), which refuse a shared one 0x9E: `codes` puts the hub's codes in their
places in the SUBACK. A delivery's PUBLISH is at the QoS granted (at most 1), without the retain
mark (retained messages are not sent to shared subscriptions, 4.8.2); a QoS 1 one is acknowledged to
the home with the client's PUBACK, a QoS 0 one when sent, an expired one at once; one that cannot
be sent (the session is closing) goes back to the home for another member.
"""

from __future__ import annotations

from tidings.core.event import event_from_fields
from tidings.core.mqtt import bridge
from tidings.core.mqtt import packets as p
from tidings.core.share.hub import SUCCESS, ShareHub, parse
from tidings.core.share.members import ShareRef


class SharedOf:
    __slots__ = ("granted", "hub", "pending", "tokens")

    def __init__(self, hub: ShareHub | None) -> None:
        self.hub = hub
        self.granted: dict[str, int] = {}  # shared filter -> QoS granted
        self.pending: dict[int, dict[int, int]] = {}  # SUBSCRIBE packet id -> {filter index: code}
        self.tokens: dict[int, ShareRef] = {}  # QoS 1 deliveries awaiting their PUBACK, by token

    def subscribe(self, conn: int, client: str, scope: str, packet_id: int,
                  wanted: tuple[p.TopicFilter, ...]) -> bool:
        """The SUBSCRIBE's shared filters joined (their codes kept for its SUBACK), `scope` being the
        client's identity; True when one has
        No Local, a Protocol Error (3.8.3.1): nothing joined, the connection is to end."""
        hub = self.hub
        if hub is None:
            return False
        if any(t.no_local and parse(t.filter) is not None for t in wanted):
            return True
        codes: dict[int, int] = {}
        for i, topic in enumerate(wanted):
            code = hub.subscribe(conn, client, scope, topic.filter)
            if code is None:
                continue
            qos = min(topic.qos, 1)
            if code == SUCCESS:
                self.granted[topic.filter] = qos
            codes[i] = qos if code == SUCCESS else code
        if codes:
            self.pending[packet_id] = codes
        return False

    def codes(self, packet_id: int, codes: tuple[int, ...]) -> tuple[int, ...]:
        """The SUBACK's codes, the shared filters' put in their places."""
        shared = self.pending.pop(packet_id, None)
        if not shared:
            return codes
        return tuple(shared.get(i, code) for i, code in enumerate(codes))

    def unsubscribe(self, conn: int, scope: str, filters: tuple[str, ...], codes: tuple[int, ...]) -> tuple[int, ...]:
        hub = self.hub
        if hub is None:
            return codes
        out = []
        for flt, code in zip(filters, codes, strict=True):
            shared = hub.unsubscribe(conn, scope, flt)
            if shared == SUCCESS:
                self.granted.pop(flt, None)
            out.append(code if shared is None else shared)
        return tuple(out)

    def publish(self, ref: ShareRef, record: list[object], level: int, wall_us: int, open_: bool) -> p.Publish | None:
        """The PUBLISH of a delivery; None when it is not sent (acknowledged or returned here)."""
        assert self.hub is not None
        _, name, topic_filter = ref.group
        qos = self.granted.get(f"$share/{name}/{topic_filter}")
        if not open_ or qos is None:  # closing, or unsubscribed since: another member takes it
            self.hub.acked(ref, False)
            return None
        try:
            publish = bridge.publish_of(event_from_fields(record), qos, level, wall_us)
        except ValueError:  # a record the home should not have sent: nothing to deliver
            publish = None
        if publish is None:  # expired (3.3.2.3.3), done
            self.hub.acked(ref)
        return publish

    def sent(self, token: int, ref: ShareRef, qos: int) -> None:
        assert self.hub is not None
        if qos:
            self.tokens[token] = ref
        else:
            self.hub.acked(ref)

    def delivered(self, token: int) -> None:
        """The delivery `token` ended (PUBACK, or dropped as over the client's Maximum Packet Size)."""
        ref = self.tokens.pop(token, None)
        if ref is not None and self.hub is not None:
            self.hub.acked(ref)


__all__ = ["SharedOf", "parse"]
