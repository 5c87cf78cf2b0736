"""MQTT sessions around the broker core, in process (core/mqtt/gateway.py, session.py): the event's
fsync before PUBACK, QoS 2 logged once, wills, passwords only where they cannot be read, refusals by reason
code, the keep-alive, the in-flight window."""

from __future__ import annotations

import random

import pytest

from tidings.core.auth.guard import Guard
from tidings.core.broker.broker import Broker
from tidings.core.config import BrokerConfig
from tidings.core.effects import Append, Disconnect, Send
from tidings.core.event import EventRecord
from tidings.core.inputs import Accepted, ConnectionLost, Received, TimerFired, WriteSynced
from tidings.core.mqtt import packets as p
from tidings.core.mqtt import persistent
from tidings.core.mqtt.bridge import MqttSettings
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.exactly_once import MqttStateSaved, SaveMqttState
from tidings.core.mqtt.gateway import MqttGateway
from tidings.core.mqtt.properties import Properties
from tidings.core.mqtt.session import OPEN
from tidings.core.wire import messages

from .core_harness import Harness

S = 1_000_000_000


class Gate:
    """A broker core (tests/unit/core_harness.py) with the MQTT gateway in front, and MQTT clients by conn."""

    def __init__(self, settings: MqttSettings | None = None, config: BrokerConfig | None = None,
                 guard: Guard | None = None, saved_state: bytes | None = None,
                 log: list[tuple[int, bytes]] | None = None) -> None:
        """`log`: the records a restarted broker finds in its log (its LogState theirs)."""
        self.h = Harness(config, guard=guard)
        if log is not None:
            self.h.records = log
            self.h.broker = Broker(config or BrokerConfig(), "p-test", self.h.state(), guard)
        self.gw = MqttGateway(self.h.broker, settings or MqttSettings(), lambda n: b"\x01" * n, saved_state)
        self.keyed: list[tuple[int, bytes]] = []  # (tick, dedup key) of the records logged with one
        self.saves: list[SaveMqttState] = []  # asked for, not yet on disk (`save_done`)
        self.saved_state = saved_state  # what is on disk
        self.h.feed = self.feed  # (its log reads answered through the gateway)
        self.decoders: dict[int, PacketDecoder] = {}
        self.closed: set[int] = set()
        self.now = 0

    def feed(self, inp):
        self.run(self.gw.handle(inp))

    def run(self, effects):
        for eff in effects:
            if isinstance(eff, Send):
                self.h.sent.setdefault(eff.conn, []).append(eff.data)
            elif isinstance(eff, Disconnect):
                self.closed.add(eff.conn)
            elif isinstance(eff, Append) and eff.keys:
                self.keyed += [(tick, key) for (tick, _), key in zip(eff.records, eff.keys, strict=True)]
            self.h.apply([eff] if not isinstance(eff, Send | Disconnect) else [])
        self.saves += self.gw.take_saves()

    def save_done(self) -> None:
        """The runtime's saves are on disk (aio/mqtt.py), in order."""
        while self.saves:
            save = self.saves.pop(0)
            self.saved_state = save.data
            self.run(self.gw.state_saved(MqttStateSaved(self.now, save.version)))

    def restarted(self) -> Gate:
        """The broker after a kill -9: its log (synced or not: a process's kill keeps what it wrote),
        the dedup window rebuilt from it, the saved MQTT state; every connection gone."""
        g = Gate(saved_state=self.saved_state, log=list(self.h.records))
        g.h.broker.dedup.restore(self.keyed, g.h.wall_us)
        g.keyed = list(self.keyed)
        g.now = self.now
        return g

    def connect(self, conn: int, version: int = 5, secure: bool = True, source: str = "", **fields) -> list:
        self.gw.expect(conn, secure, source)
        self.feed(Accepted(self.now, conn))
        self.decoders[conn] = PacketDecoder(1 << 24, version)
        return self.send(conn, p.Connect(version, fields.pop("client_id", f"c{conn}"), **fields))

    def send(self, conn: int, packet, raw: bytes | None = None) -> list:
        """Send `packet` (or `raw` bytes); the packets the client got back."""
        self.now += 1
        version = self.decoders[conn].version or 5
        self.feed(Received(self.now, self.h.wall_us, conn, raw if raw is not None else encode(packet, version)))
        return self.answers(conn)

    def answers(self, conn: int) -> list:
        data = b"".join(self.h.sent.pop(conn, []))
        return self.decoders[conn].feed(data)

    def sync(self) -> None:
        token = max(self.h.unsynced)
        self.h.unsynced.clear()
        self.feed(WriteSynced(self.now, token, self.h.state()))


def test_a_qos1_publish_is_acknowledged_only_once_its_event_is_fsynced():
    g = Gate()
    [connack] = g.connect(1)
    assert (connack.reason_code, connack.properties.retain_available) == (0, None)  # (absent: 1)
    assert g.send(1, p.Publish("a/b", b"x", 1, packet_id=9)) == []  # logged, not yet synced: no PUBACK
    assert len(g.h.records) == 1 and g.h.unsynced
    g.sync()
    assert g.answers(1) == [p.Puback(9)]


def test_qos0_is_not_acknowledged_and_delivered_at_qos0():
    g = Gate()
    g.connect(1)
    g.connect(2)
    assert g.send(2, p.Subscribe(1, (p.TopicFilter("a/#", 1),))) == [p.Suback(1, (1,))]
    g.send(1, p.Publish("a/b", b"zero", 0))
    g.sync()
    assert g.answers(1) == []
    [delivered] = g.answers(2)
    assert (delivered.topic, delivered.payload, delivered.qos, delivered.packet_id) == ("a/b", b"zero", 0, None)


def test_a_retried_qos2_publish_is_logged_once():
    g = Gate()
    g.connect(1)
    g.send(1, p.Publish("a/b", b"two", 2, packet_id=5))
    g.sync()
    assert g.answers(1) == [p.Pubrec(5)]
    assert g.send(1, p.Publish("a/b", b"two", 2, dup=True, packet_id=5)) == [p.Pubrec(5)]
    assert g.send(1, p.Pubrel(5)) == [p.Pubcomp(5)]
    assert len(g.h.records) == 1


def test_qos2_goes_to_a_clean_subscriber_through_pubrec_pubrel_pubcomp_at_min_of_both_qos():
    g = Gate()
    g.connect(1)
    g.connect(2, version=4)
    assert g.send(2, p.Subscribe(1, (p.TopicFilter("q/#", 2),))) == [p.Suback(1, (2,))]
    g.send(1, p.Publish("q/two", b"2", 2, packet_id=1))
    g.send(1, p.Publish("q/one", b"1", 1, packet_id=2))
    g.sync()
    two, one = g.answers(2)
    assert (two.payload, two.qos, one.payload, one.qos) == (b"2", 2, b"1", 1)  # min(publish, granted)
    assert g.send(2, p.Pubrec(two.packet_id)) == [p.Pubrel(two.packet_id)]
    assert g.send(2, p.Pubcomp(two.packet_id)) == []
    assert g.send(2, p.Puback(one.packet_id)) == []
    assert g.gw.sessions[2].machine.deliveries.in_flight == {}  # both flows ended


def persistent_qos2(g: Gate, conn: int, version: int, *pids: int) -> None:
    """A persistent session's QoS 2 PUBLISHes `pids`, logged and synced: PUBREC each."""
    g.connect(conn, version=version, client_id="q2", clean_start=False,
              properties=Properties(session_expiry_interval_s=3600) if version == 5 else Properties())
    for pid in pids:
        g.send(conn, p.Publish("a/b", f"m{pid}".encode(), 2, packet_id=pid))
    g.sync()
    assert g.answers(conn) == [p.Pubrec(pid) for pid in pids]


@pytest.mark.parametrize("version", [4, 5])
def test_a_persistent_sessions_qos2_is_logged_once_through_a_kill_9_and_its_pubrel_completed(version):
    g = Gate()
    persistent_qos2(g, 1, version, 5, 6)
    assert g.send(1, p.Pubrel(6)) == []  # its PUBCOMP waits for the release to be saved
    g.save_done()
    assert g.answers(1) == [p.Pubcomp(6)]
    g.send(1, p.Publish("a/b", b"m7", 2, packet_id=7))  # logged (the process's write), not synced: no PUBREC
    assert len(g.h.records) == 3
    g2 = g.restarted()  # kill -9: PUBREC 5 and 7 lost on the way, 6 completed
    [connack] = g2.connect(2, version=version, client_id="q2", clean_start=False,
                           properties=Properties(session_expiry_interval_s=3600) if version == 5 else Properties())
    assert connack.reason_code == 0
    assert g2.send(2, p.Publish("a/b", b"m5", 2, dup=True, packet_id=5)) == [p.Pubrec(5)]  # logged: at once
    # the duplicate answered with the original's tick (on disk: a process's kill keeps what it wrote)
    assert g2.send(2, p.Publish("a/b", b"m7", 2, dup=True, packet_id=7)) == [p.Pubrec(7)]
    assert len(g2.h.records) == 3  # nothing logged twice
    g2.send(2, p.Publish("a/b", b"m6-again", 2, packet_id=6))  # 6 was released: a new message
    g2.sync()
    assert g2.answers(2) == [p.Pubrec(6)] and len(g2.h.records) == 4
    assert g2.send(2, p.Pubrel(5)) == []
    g2.save_done()
    assert g2.answers(2) == [p.Pubcomp(5)]


def test_a_release_not_saved_before_the_kill_is_awaited_again():
    g = Gate()
    persistent_qos2(g, 1, 5, 3)
    assert g.send(1, p.Pubrel(3)) == []  # the save is under way when the broker dies
    g2 = g.restarted()
    g2.connect(2, client_id="q2", clean_start=False, properties=Properties(session_expiry_interval_s=3600))
    assert g2.send(2, p.Publish("a/b", b"m3", 2, dup=True, packet_id=3)) == [p.Pubrec(3)]  # still held
    g2.send(2, p.Pubrel(3))
    g2.save_done()
    assert g2.answers(2) == [p.Pubcomp(3)]  # 0x00: it was known
    assert len(g2.h.records) == 1


def test_a_clean_start_forgets_the_keys_before_its_connack():
    g = Gate()
    persistent_qos2(g, 1, 5, 4)
    g.feed(ConnectionLost(g.now, 1))
    assert g.connect(2, client_id="q2", clean_start=True) == []  # the CONNACK waits for the save
    g.save_done()
    [connack] = g.answers(2)
    assert connack.reason_code == 0 and not connack.session_present
    g2 = g.restarted()
    g2.connect(3, client_id="q2", clean_start=False, properties=Properties(session_expiry_interval_s=3600))
    g2.send(3, p.Publish("a/b", b"new", 2, packet_id=4))  # the new session's 4: not the old one's
    g2.sync()
    assert g2.answers(3) == [p.Pubrec(4)] and len(g2.h.records) == 2


def test_a_clean_sessions_qos2_keeps_no_key_and_its_pubcomp_goes_at_once():
    g = Gate()
    g.connect(1, version=4, client_id="plain")
    g.send(1, p.Publish("a/b", b"x", 2, packet_id=1))
    g.sync()
    assert g.answers(1) == [p.Pubrec(1)] and g.keyed == []
    assert g.send(1, p.Pubrel(1)) == [p.Pubcomp(1)] and g.saves == []


def test_a_password_over_plain_tcp_from_another_host_is_refused():
    g = Gate()
    [connack] = g.connect(1, secure=False, username="sensor", password=b"c2VjcmV0c2VjcmV0c2VjcmV0")
    assert connack.reason_code == 0x87 and 1 in g.closed
    g = Gate(MqttSettings(allow_plain_password=True))
    [connack] = g.connect(1, secure=False, username="sensor", password=b"c2VjcmV0c2VjcmV0c2VjcmV0")
    assert connack.reason_code == 0x86  # let through to the auth check: this broker has no identities


def test_topics_tidings_cannot_hold_are_refused_by_reason_code():
    g = Gate()
    g.connect(1)
    [puback] = g.send(1, p.Publish("x" * 2000, b"", 1, packet_id=3))
    assert (puback.packet_id, puback.reason_code) == (3, 0x90)
    [suback] = g.send(1, p.Subscribe(4, (p.TopicFilter("$share//a", 1), p.TopicFilter("ok/+", 2))))
    assert suback.reason_codes == (0x8F, 2)
    assert g.send(1, p.Publish("a", b"", 0, properties=Properties(user_properties=(("mqtt.qos", "1"),)))) == []
    assert len(g.h.records) == 0  # a user property under mqtt. is the broker's: refused (QoS 0: no answer)


def test_a_retained_publish_is_refused_in_5_and_the_connection_closed_where_the_broker_refused_the_feed():
    g = Gate()
    g.feed(TimerFired(0, g.h.wall_us))  # the gateway opens its retained feed (core/mqtt/retained.py)
    g.gw.retained.from_broker(messages.error("forbidden", "no anonymous clients here"))
    [connack] = g.connect(1)
    assert connack.properties.retain_available == 0
    [disconnect] = g.send(1, p.Publish("a", b"r", 1, retain=True, packet_id=1))
    assert disconnect.reason_code == 0x9A and 1 in g.closed


def test_a_silent_client_is_closed_after_one_and_a_half_keep_alives():
    g = Gate()
    g.connect(1, keep_alive_s=2)
    deadline = g.gw.next_deadline()
    assert deadline is not None and deadline <= g.now + 3 * S
    g.feed(TimerFired(3 * S + 10, g.h.wall_us))
    assert [type(x) for x in g.answers(1)] == [p.Disconnect] and 1 in g.closed


def test_deliveries_wait_behind_the_receive_maximum():
    g = Gate()
    g.connect(1)
    g.connect(2, properties=Properties(receive_maximum=2))
    g.send(2, p.Subscribe(1, (p.TopicFilter("w", 1),)))
    for i in range(3):
        g.send(1, p.Publish("w", bytes([i]), 1, packet_id=i + 1))
    g.sync()
    first = g.answers(2)
    assert [m.payload for m in first] == [b"\x00", b"\x01"]
    assert [m.payload for m in g.send(2, p.Puback(first[0].packet_id))] == [b"\x02"]


def test_a_second_connection_with_the_client_id_takes_the_session_over():
    g = Gate()
    g.connect(1, client_id="same")
    g.connect(2, client_id="same")
    assert [m.reason_code for m in g.answers(1)] == [0x8E] and 1 in g.closed
    g.feed(ConnectionLost(g.now, 1))
    assert g.gw.sessions[2].state is OPEN and 1 not in g.gw.sessions


def test_the_gateway_renews_its_subscriptions_lease():
    """A native client renews its lease itself; an MQTT client's keep-alive stands for it."""
    g = Gate(config=BrokerConfig(lease_ns=S))
    g.connect(1)
    g.connect(2)
    g.send(2, p.Subscribe(1, (p.TopicFilter("l", 0),)))
    for _ in range(20):  # 5 s of timers, every 250 ms
        g.now += S // 4
        g.feed(TimerFired(g.now, g.h.wall_us))
    assert g.h.broker.leases.expired_total == 0
    g.send(1, p.Publish("l", b"still", 0))
    g.sync()
    assert [m.payload for m in g.answers(2)] == [b"still"]


def test_a_will_is_published_when_the_connection_ends_without_disconnect():
    g = Gate()
    g.connect(1, will=p.Will("wills/c1", b"gone", 1))
    g.connect(2)
    g.connect(3, will=p.Will("wills/c3", b"never", 1))
    g.send(2, p.Subscribe(1, (p.TopicFilter("wills/#", 1),)))
    g.send(3, p.Disconnect())
    g.feed(ConnectionLost(g.now, 3))
    g.feed(ConnectionLost(g.now, 1))
    g.sync()
    assert [(m.topic, m.payload) for m in g.answers(2)] == [("wills/c1", b"gone")]
    assert g.gw.status()["mqtt"]["wills_published"] == 1


def test_a_persistent_session_gets_what_it_did_not_acknowledge_after_a_reconnect():
    g = Gate()
    g.h.apply(g.h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    g.connect(1, version=4, client_id="keeper", clean_start=False)
    assert g.send(1, p.Subscribe(1, (p.TopicFilter("d/#", 1),))) == [p.Suback(1, (1,))]
    g.connect(2)
    for i in range(3):
        g.send(2, p.Publish("d/x", bytes([i]), 1, packet_id=i + 1))
    g.sync()
    first = g.answers(1)
    assert [m.payload for m in first] == [b"\x00", b"\x01", b"\x02"]
    g.send(1, p.Puback(first[0].packet_id))  # the first acknowledged, the others not
    g.feed(ConnectionLost(g.now, 1))
    g.send(2, p.Publish("d/x", b"\x03", 1, packet_id=9))  # published while it is away
    g.sync()
    connack, *resent = g.connect(3, version=4, client_id="keeper", clean_start=False)
    assert connack.session_present
    # at once, under their packet identifiers with DUP (4.4)
    assert [(m.payload, m.packet_id, m.dup) for m in resent] == [(m.payload, m.packet_id, True) for m in first[1:]]
    g.h.serve_reads()
    g.feed(TimerFired(g.now, g.h.wall_us))
    later = g.answers(3)
    assert [m.payload for m in later] == [b"\x03"]  # what came since; the two resent do not come twice
    for m in [*resent, *later]:
        g.send(3, p.Puback(m.packet_id))
    g.feed(ConnectionLost(g.now, 3))
    assert g.connect(6, version=4, client_id="keeper", clean_start=False)[1:] == []  # all acknowledged
    g.h.serve_reads()
    g.feed(TimerFired(g.now, g.h.wall_us))
    assert g.answers(6) == []
    g.feed(ConnectionLost(g.now, 6))
    [connack] = g.connect(4, version=4, client_id="keeper", clean_start=True)  # a clean start ends it
    assert not connack.session_present
    g.feed(ConnectionLost(g.now, 4))
    [connack] = g.connect(5, version=4, client_id="keeper", clean_start=False)
    assert not connack.session_present


@pytest.mark.parametrize("version", [4, 5])
def test_a_persistent_sessions_qos2_delivery_reaches_it_once_across_reconnects(version):
    g = Gate()
    g.h.apply(g.h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    props = Properties(session_expiry_interval_s=3600) if version == 5 else Properties()
    g.connect(1, version=version, client_id="q2sub", clean_start=False, properties=props)
    assert g.send(1, p.Subscribe(1, (p.TopicFilter("e/#", 2),))) == [p.Suback(1, (2,))]
    g.connect(2)
    g.send(2, p.Publish("e/a", b"A", 2, packet_id=1))
    g.send(2, p.Publish("e/b", b"B", 2, packet_id=2))
    g.sync()
    assert g.answers(1) == []  # QoS 2 PUBLISHes wait until their packet ids are saved (inflight_ids.py)
    g.save_done()
    a, b = g.answers(1)
    assert (a.qos, b.qos) == (2, 2)
    assert g.send(1, p.Pubrec(a.packet_id)) == []  # the PUBREL too
    g.save_done()
    assert g.answers(1) == [p.Pubrel(a.packet_id)]  # the client has A; B unanswered
    g.feed(ConnectionLost(g.now, 1))
    _, *resent = g.connect(3, version=version, client_id="q2sub", clean_start=False, properties=props)
    assert resent == [p.Pubrel(a.packet_id), p.Publish("e/b", b"B", 2, False, True, b.packet_id)]
    g.h.serve_reads()
    g.feed(TimerFired(g.now, g.h.wall_us))
    assert g.answers(3) == []  # A and B again from the subscription: the resent ones stand for them
    assert g.send(3, p.Pubcomp(a.packet_id)) == []
    assert g.send(3, p.Pubrec(b.packet_id)) == []
    g.save_done()
    assert g.answers(3) == [p.Pubrel(b.packet_id)]
    assert g.send(3, p.Pubcomp(b.packet_id)) == []
    g.feed(ConnectionLost(g.now, 3))
    assert g.connect(4, version=version, client_id="q2sub", clean_start=False, properties=props)[1:] == []
    g.h.serve_reads()
    g.feed(TimerFired(g.now, g.h.wall_us))
    assert g.answers(4) == []  # both done: the subscription's position is past them


def test_response_topic_and_correlation_data_travel_with_the_event_to_5_0_subscribers():
    g = Gate()
    g.connect(1)
    g.connect(2)
    g.connect(3, version=4)
    g.send(2, p.Subscribe(1, (p.TopicFilter("req/#", 1),)))
    g.send(3, p.Subscribe(1, (p.TopicFilter("req/#", 0),)))
    g.send(1, p.Publish("req/a", b"?", 0, properties=Properties(response_topic="rep/a",
                                                                correlation_data=b"\x00\xffid")))
    g.sync()
    [(_, record)] = g.h.records
    attrs = EventRecord.decode(record).attributes  # what a native subscriber receives
    assert attrs["mqtt.response_topic"] == "rep/a" and attrs["mqtt.correlation_data"] == "AP9pZA=="
    [delivered] = g.answers(2)
    assert (delivered.properties.response_topic, delivered.properties.correlation_data) == ("rep/a", b"\x00\xffid")
    [old] = g.answers(3)
    assert old.properties == Properties()  # 3.1.1 has no properties


def test_a_no_local_subscription_does_not_get_its_own_connections_messages():
    g = Gate()
    g.connect(1)
    g.connect(2)
    g.send(1, p.Subscribe(1, (p.TopicFilter("chat/#", 1, no_local=True),)))
    g.send(2, p.Subscribe(1, (p.TopicFilter("chat/#", 1),)))
    g.send(1, p.Publish("chat/a", b"mine", 0))
    g.send(2, p.Publish("chat/a", b"theirs", 0))
    g.sync()
    assert [m.payload for m in g.answers(1)] == [b"theirs"]
    assert [m.payload for m in g.answers(2)] == [b"mine", b"theirs"]


def test_a_subscription_identifier_comes_back_in_each_publish_it_delivers():
    g = Gate()
    [connack] = g.connect(1)
    assert connack.properties.subscription_identifier_available is None  # (absent: available)
    g.connect(2)
    assert g.send(1, p.Subscribe(1, (p.TopicFilter("s/#", 1),), Properties(subscription_identifiers=(300,)))) == [
        p.Suback(1, (1,))]
    g.send(1, p.Subscribe(2, (p.TopicFilter("s/a", 0),)))
    g.send(2, p.Publish("s/a", b"x", 0))
    g.sync()
    got = sorted(m.properties.subscription_identifiers for m in g.answers(1))
    assert got == [(), (300,)]  # one PUBLISH per matching subscription, each with its own identifier
    g.send(1, p.Subscribe(3, (p.TopicFilter("s/#", 1),), Properties(subscription_identifiers=(7,))))  # replaced
    g.send(2, p.Publish("s/b", b"y", 0))
    g.sync()
    assert [m.properties.subscription_identifiers for m in g.answers(1)] == [(7,)]


def test_a_persistent_sessions_subscription_options_outlive_its_connection():
    g = Gate()
    g.h.apply(g.h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    expiry = Properties(session_expiry_interval_s=3600)
    g.connect(1, client_id="opts", clean_start=False, properties=expiry)
    assert g.send(1, p.Subscribe(1, (p.TopicFilter("o/#", 1, no_local=True),),
                                 Properties(subscription_identifiers=(42,)))) == [p.Suback(1, (1,))]
    g.feed(ConnectionLost(g.now, 1))
    [connack] = g.connect(2, client_id="opts", clean_start=False, properties=expiry)
    assert connack.session_present
    g.send(2, p.Publish("o/own", b"mine", 1, packet_id=1))  # No Local kept: not delivered back
    g.connect(3)
    g.send(3, p.Publish("o/x", b"theirs", 1, packet_id=1))
    g.sync()
    got = [m for m in g.answers(2) if isinstance(m, p.Publish)]
    assert [(m.payload, m.properties.subscription_identifiers) for m in got] == [(b"theirs", (42,))]
    # a SUBSCRIBE under other options replaces it (its name changes): one subscription, the new identifier
    g.send(2, p.Subscribe(2, (p.TopicFilter("o/#", 1),), Properties(subscription_identifiers=(43,))))
    g.send(3, p.Publish("o/y", b"again", 1, packet_id=2))
    g.sync()
    got = [m for m in g.answers(2) if isinstance(m, p.Publish)]
    assert [(m.payload, m.properties.subscription_identifiers) for m in got] == [(b"again", (43,))]
    assert [n for n, _, _ in g.gw._held("mqtt", "mqtt:opts:")] == ["mqtt:opts:1,i43:o/#"]


@pytest.mark.parametrize("options", [persistent.NO_OPTIONS, persistent.Options(True, True, 268_435_455),
                                     persistent.Options(identifier=1), persistent.Options(retain_as_published=True)])
def test_a_persistent_subscriptions_name_holds_its_options(options):
    name = persistent.name_of("c:1", 1, "a/:b/#", options)
    assert persistent.parse(name, "c:1") == (1, options, "a/:b/#")
    assert persistent.parse("mqtt:c:1:0:old/form", "c:1") == (0, persistent.NO_OPTIONS, "old/form")
    for bad in ("mqtt:c:1:1,x:a", "mqtt:c:1:1,i0:a", "mqtt:c:1:1,n,n:a", "mqtt:c:1:3:a", "mqtt:c:1:1,i268435456:a"):
        assert persistent.parse(bad, "c:1") is None


def test_a_message_expiry_interval_travels_with_the_event():
    g = Gate()
    g.connect(1)
    g.connect(2)
    g.send(2, p.Subscribe(1, (p.TopicFilter("e/#", 1),)))
    g.send(1, p.Publish("e/a", b"soon", 0, properties=Properties(message_expiry_interval_s=10)))
    g.sync()
    [fresh] = g.answers(2)
    assert fresh.properties.message_expiry_interval_s == 10  # delivered within its first second
    [(_, record)] = g.h.records
    assert EventRecord.decode(record).attributes["mqtt.expiry_interval_s"] == 10
