"""The MQTT fast paths say what the packet-by-packet paths say (core/mqtt/publish_run.py, codec.py
`take_publishes`, subscriptions.py's plain deliveries, delivery.py's `Plain` items):

- the decoder's runs of PUBLISH fields and PUBACK ids, then `take`, give the packets (and the refusal) `take` alone
  gives, for valid streams split anywhere and for mutated bytes;
- a machine that reports runs (`runs=True`) gives, its `PublishedRun`s read as the `Published` facts
  they stand for, the effects of one that does not, whatever the client sends (retries, ids in use,
  over the window, properties, aliases, retain and QoS the limits refuse, garbage);
- a gateway's sessions answer a client and log its events alike with either machine;
- a plain delivery is the PUBLISH `bridge.publish_of` makes of the event, and its bytes are
  `encode`'s, in order between QoS 1 ones.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SOAK
from tests.unit.test_mqtt_roundtrip import publishes, streams
from tidings.core.inputs import Received
from tidings.core.mqtt import bridge
from tidings.core.mqtt import effects as fx
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.delivery import Plain
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.limits import ProtocolLimits
from tidings.core.mqtt.packet_type import MQTT_5, MQTT_311
from tidings.core.mqtt.packets import Connect, Packet, Pingreq, Puback, Pubcomp, Publish, Pubrec, Pubrel
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties
from tidings.core.mqtt.protocol import MqttConnection
from tidings.core.mqtt.subscriptions import MqttSub, MqttSubscriptions
from tidings.core.wire import messages

from .test_mqtt_deliver_many import split, wire
from .test_mqtt_gateway import Gate
from .test_mqtt_protocol import Wire

EXAMPLES = 1000 if SOAK else 200
T0 = 1_000_000_000
versions = st.sampled_from((MQTT_311, MQTT_5))


def drained(decoder: PacketDecoder, runs: bool) -> list[Packet]:
    """Every whole packet, PUBLISH runs first taken as fields when `runs`."""
    out: list[Packet] = []
    while True:
        if runs and (fields := decoder.take_publishes()):
            out += [Publish(*f) for f in fields]
            continue
        if runs and (acks := decoder.take_pubacks()):
            out += [Puback(pid) for pid in acks]
            continue
        packet = decoder.pull()
        if packet is None:
            return out
        out.append(packet)


@settings(max_examples=EXAMPLES, deadline=None)
@given(stream=streams(), cuts=st.lists(st.integers(0, 400), max_size=3), flips=st.lists(st.integers(0, 400)))
def test_the_decoders_runs_give_the_packets_and_the_refusal_pull_gives(stream, cuts, flips):
    version, packets = stream
    data = bytearray(b"".join(encode(p, version) for p in packets))
    for at in flips:  # mutated bytes too: the same refusal, at the same packet
        if data:
            data[at % len(data)] ^= 0x5A
    plain, fast = PacketDecoder(300, version), PacketDecoder(300, version)
    got: dict[bool, list[Packet]] = {False: [], True: []}
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        for decoder, runs in ((plain, False), (fast, True)):
            decoder.push(bytes(data[start:cut]))
            got[runs] += drained(decoder, runs)
        start = max(start, cut)
        assert (repr(plain.failure), plain.held_bytes) == (repr(fast.failure), fast.held_bytes)
    assert got[True] == got[False]


def expanded(effects: list[fx.MqttEffect]) -> list[fx.MqttEffect]:
    """A PublishedRun as the Published facts it stands for."""
    out: list[fx.MqttEffect] = []
    for e in effects:
        if isinstance(e, fx.PublishedRun):
            out += [fx.Published(t, pl, q, r, NO_PROPERTIES, pid) for t, pl, q, r, pid in e.items]
        else:
            out.append(e)
    return out


def settled(effects: list[fx.MqttEffect]) -> list[tuple[bytes, list[fx.MqttEffect]]]:
    """What a client and the broker side see of the effects: between one Close and the next, the
    bytes sent (in order, however cut into Sends) and the facts (in order). A run of PUBACKs ends
    its deliveries, then refills the window once: its Sends come after its facts, not among them."""
    out: list[tuple[bytes, list[fx.MqttEffect]]] = []
    data, facts = b"", []
    for e in expanded(effects):
        if isinstance(e, fx.Send):
            data += e.data
            continue
        facts.append(e)
        if isinstance(e, fx.Close):
            out.append((data, facts))
            data, facts = b"", []
    return [*out, (data, facts)]


@st.composite
def client_chunks(draw: st.DrawFn, version: int) -> list[bytes]:
    """What a client sends after its CONNECT, in chunks: plain PUBLISHes (ids from a few, so that
    retries, ids in use and a full window come), any PUBLISH, PUBACK, PINGREQ, now and then garbage."""
    plain = st.builds(lambda t, pl, q, r, pid: Publish(t, pl, q, r, False, pid if q else None),
                      st.sampled_from(("a", "a/b", "c/d")), st.binary(max_size=8), st.integers(0, 2), st.booleans(),
                      st.integers(1, 5))
    packet = st.one_of(plain, plain, plain, publishes(version), st.builds(Puback, st.integers(1, 5)),
                       st.builds(Puback, st.integers(1, 5)), st.just(Pingreq()))
    chunks = draw(st.lists(st.lists(packet, max_size=8), min_size=1, max_size=4))
    out = [b"".join(encode(p, version) for p in chunk) for chunk in chunks]
    if draw(st.integers(0, 9)) == 0:
        out[-1] += draw(st.binary(min_size=1, max_size=6))
    return out


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data(), version=versions, maximum_qos=st.integers(0, 2), retain=st.booleans(),
       receive_maximum=st.integers(1, 4), answer=st.booleans(), deliveries=st.lists(st.integers(0, 1), max_size=8),
       window=st.integers(1, 8))
def test_a_machine_reporting_runs_says_what_one_reporting_each_publish_says(data, version, maximum_qos, retain,
                                                                           receive_maximum, answer, deliveries,
                                                                           window):
    limits = ProtocolLimits(maximum_qos=maximum_qos, retain_available=retain, receive_maximum=receive_maximum,
                            packet_bytes_max=200, deliveries_in_flight_max=window)  # (deliveries wait behind it)
    one, run = MqttConnection(T0, limits, "auto"), MqttConnection(T0, limits, "auto", runs=True)
    connect = encode(Connect(version, "dev"), version)
    for m in (one, run):
        m.receive(T0, connect)
        m.accept(T0)
    # ours to the client (their PUBACKs come among its packets: a run of them is read at once too)
    sent = [m.deliver_many([(i, Publish("d", b"", q)) for i, q in enumerate(deliveries)]) for m in (one, run)]
    assert sent[1] == sent[0]
    for chunk in data.draw(client_chunks(version)):
        said = [m.receive(T0, chunk) for m in (one, run)]
        assert settled(said[1]) == settled(said[0])
        if answer:  # the broker side logs what was reported: receipts end, the window opens again
            for e in expanded(said[0]):
                if isinstance(e, fx.Published) and e.packet_id is not None:
                    assert run.publish_done(e.packet_id) == one.publish_done(e.packet_id)
    assert run.state == one.state


def test_a_run_is_one_fact():
    m = MqttConnection(T0, None, "auto", runs=True)
    m.receive(T0, encode(Connect(MQTT_5, "dev"), MQTT_5))
    m.accept(T0)
    effects = m.receive(T0, b"".join(encode(Publish("a/b", b"%d" % i, i % 2, packet_id=i + 1 if i % 2 else None),
                                            MQTT_5) for i in range(6)))
    assert [type(e) for e in effects] == [fx.PublishedRun]
    assert [item[4] for item in effects[0].items] == [None, 2, None, 4, None, 6]


# ---- the session's side: the same answers and the same events logged ---------------------------------------

@settings(max_examples=30 if not SOAK else 300, deadline=None)
@given(version=versions, chunks=st.lists(st.lists(st.tuples(
    st.sampled_from(("a/b", "a/b", "c", "$SYS/x", "x/" * 40, "é/" + "y" * 1100)), st.binary(max_size=20),
    st.integers(0, 2), st.booleans(), st.integers(1, 6)), min_size=1, max_size=6), min_size=1, max_size=3))
def test_a_gateway_logs_and_answers_a_run_as_it_does_publish_by_publish(version, chunks):
    gates = [Gate(), Gate()]
    for gate in gates:
        gate.connect(1, version)
    gates[1].gw.sessions[1].machine.runs = False
    for chunk in chunks:
        raw = b"".join(encode(Publish(t, pl, q, r, False, pid if q else None), version) for t, pl, q, r, pid in chunk)
        answers = []
        for gate in gates:
            gate.now += 1
            gate.feed(Received(gate.now, gate.h.wall_us, 1, raw))
            gate.h.sync()
            answers.append((gate.answers(1), 1 in gate.closed, gate.gw.sessions[1].published,
                            gate.gw.sessions[1].refused))
        assert answers[1] == answers[0]
    assert gates[1].h.records == gates[0].h.records


# ---- deliveries --------------------------------------------------------------------------------------

ATTRIBUTES = st.dictionaries(st.sampled_from((bridge.QOS, bridge.RETAIN, "k", bridge.CONTENT_TYPE)),
                             st.one_of(st.just(0), st.just(1), st.booleans(), st.just("v")), max_size=3)


@settings(max_examples=EXAMPLES, deadline=None)
@given(records=st.lists(st.tuples(st.sampled_from(("a", "b/c")), ATTRIBUTES, st.binary(max_size=6), st.booleans()),
                        max_size=6),
       qos=st.integers(0, 1), level=versions, retain_as_published=st.booleans(), identifier=st.none() | st.just(3),
       odd=st.integers(0, 9))
def test_a_plain_delivery_is_the_publish_bridge_makes(records, qos, level, retain_as_published, identifier, odd):
    fields: list[object] = [["p1", 1000 + i, ch, at, "svc", "inst", pl, True] if auth else
                            ["p1", 1000 + i, ch, at, "svc", "inst", pl] for i, (ch, at, pl, auth) in enumerate(records)]
    if fields and odd == 0:
        fields[0] = ["p1", "not a tick", "a", {}, "svc", "inst", b""]  # dropped either way
    subs = MqttSubscriptions()
    subs._add(MqttSub("#", qos, 1, retain_as_published=retain_as_published, identifier=identifier))
    got = subs.deliver(messages.Events(1, fields), level)
    reference: list[object] = []
    entry = subs.sub_of[1]
    for f in fields:
        subs._deliver_event(f, entry, level, None, 0, reference)  # type: ignore[arg-type]
    assert [(Publish(*item) if isinstance(item, tuple) else item, tag) for item, tag in got] == reference


@settings(max_examples=EXAMPLES, deadline=None)
@given(qos=st.lists(st.integers(0, 1), min_size=1, max_size=10), version=versions, window=st.integers(1, 3),
       topic_bytes=st.integers(1, 200))
def test_plain_items_are_sent_as_their_publishes_are(qos, version, window, topic_bytes):
    topic = "t/" + "x" * topic_bytes  # (some over the client's Maximum Packet Size: dropped alike)
    props = Properties(maximum_packet_size_bytes=150, receive_maximum=window) if version == MQTT_5 else Properties()
    one, many = (Wire(version, ProtocolLimits(deliveries_queued_max=6)) for _ in range(2))
    for w in (one, many):
        w.connect(properties=props)
    items = [(i + 1, (topic, b"%d" % i, q)) for i, q in enumerate(qos)]
    plain = split(many.m.deliver_many(items))  # type: ignore[arg-type]
    publishes_ = split(one.m.deliver_many([(t, Publish(*item)) for t, item in items]))
    assert plain == publishes_
    acks = b"".join(encode(Puback(pid), version) for pid in range(1, len(qos) + 1))
    assert settled(many.m.receive(T0, acks)) == settled(one.m.receive(T0, acks))


def test_a_5_0_plain_delivery_carries_an_empty_property_length():
    w = wire(MQTT_5, 4, 4)
    data, _ = split(w.m.deliver_many([(1, ("a/b", b"x", 0))]))
    assert data == encode(replace(Publish("a/b", b"x"), properties=NO_PROPERTIES), MQTT_5)


@settings(max_examples=EXAMPLES, deadline=None)
@given(runs=st.lists(st.lists(st.tuples(st.sampled_from(("a", "b/é", "t/" + "x" * 120)), st.binary(max_size=300),
                                        st.integers(0, 2), st.booleans()), min_size=1, max_size=6),
                     min_size=1, max_size=3),
       version=versions, window=st.integers(1, 4), size_max=st.sampled_from((100, 200, 1 << 20)))
def test_deliveries_leave_as_encode_writes_their_publishes(runs, version, window, size_max):
    """A delivery without properties is encoded from its topic's kept bytes (delivery.py): each
    packet's bytes are `encode`'s of its Publish under the packet identifier it took, at any size (a
    remaining length over 127; over the client's Maximum Packet Size it is dropped, 0x95), whatever
    the window; what a run of PUBACKs lets go comes with the run's answer; every delivery ends."""
    props = Properties(maximum_packet_size_bytes=size_max, receive_maximum=window) if version == MQTT_5 else \
        Properties()
    w = Wire(version, ProtocolLimits(deliveries_queued_max=64, deliveries_in_flight_max=window))
    w.connect(properties=props)
    w.m.runs = True
    limit = size_max if version == MQTT_5 else 1 << 28
    given_: dict[bytes, Publish] = {}  # by payload (each made unique)
    ended: set[bytes] = set()
    token = 0

    def read(effects: list[fx.MqttEffect]) -> list[tuple[int, int]]:
        """The packets sent, each checked against its Publish; the QoS 1/2 ones' identifiers."""
        data = b"".join(e.data for e in effects if isinstance(e, fx.Send))
        decoder, ids = PacketDecoder(1 << 24, version), []
        for packet in decoder.feed(data):
            if isinstance(packet, Pubrel):  # (of a QoS 2 one: its PUBCOMP goes with the PUBREC)
                data = data[len(encode(packet, version)):]
                continue
            assert isinstance(packet, Publish)
            sent = given_[packet.payload]
            raw = encode(replace(sent, packet_id=packet.packet_id), version)
            assert data.startswith(raw) and len(raw) <= limit
            data = data[len(raw):]
            if packet.qos:
                ids.append((packet.packet_id, packet.qos))
            else:
                ended.add(packet.payload)
        assert data == b"" and decoder.failure is None
        ended.update(given_[b"%d:" % e.token].payload for e in effects if isinstance(e, fx.DeliveryDropped))
        return ids

    for run in runs:
        items: list[tuple[int, Publish | Plain]] = []
        for topic, payload, qos, retain in run:
            token += 1
            publish = Publish(topic, b"%d:" % token + payload, qos, retain)
            given_[publish.payload] = given_[b"%d:" % token] = publish
            items.append((token, publish if retain else (publish.topic, publish.payload, qos)))  # (Plain)
        acks = read(w.m.deliver_many(items))
        while acks:  # the client acknowledges what it got in one run; the window lets more go
            effects = w.m.receive(T0, b"".join(encode(Puback(pid), version) if qos == 1 else
                                               encode(Pubrec(pid), version) + encode(Pubcomp(pid), version)
                                               for pid, qos in acks))
            ended.update(given_[b"%d:" % e.token].payload for e in effects if isinstance(e, fx.DeliveryAcked))
            acks = read(effects)
    assert ended == {p.payload for p in given_.values()}
