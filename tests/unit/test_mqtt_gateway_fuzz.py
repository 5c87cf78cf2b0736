"""Hypothesis drives MQTT connections through the gateway and the broker core (core/mqtt/gateway.py):
any bytes, any packets in any order, cut anywhere, with syncs and timers between; nothing raises out
of `handle`, a session's QoS 1 window holds, and a well-behaved client beside them is served."""

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tidings.core.inputs import Accepted, ConnectionLost, Received, TimerFired
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.properties import Properties

from .test_mqtt_gateway import Gate, S

TOPICS = st.sampled_from(["a", "a/b", "a/+", "#", "$SYS/x", "", "a/#/b", "/", "x" * 1100, "$share/g/a"])
IDS = st.integers(1, 4)
PROPS = st.sampled_from([Properties(), Properties(user_properties=(("k", "v"), ("mqtt.qos", "0"))),
                         Properties(content_type="text/plain"), Properties(topic_alias=1)])
PACKETS = st.one_of(
    st.builds(lambda t, q, i, r, pr: p.Publish(t, b"x", q, r, False, i if q else None, pr),
              TOPICS, st.integers(0, 2), IDS, st.booleans(), PROPS),
    st.builds(lambda i, t, q: p.Subscribe(i, (p.TopicFilter(t, q),)), IDS, TOPICS, st.integers(0, 2)),
    st.builds(lambda i, t: p.Unsubscribe(i, (t,)), IDS, TOPICS),
    st.builds(p.Puback, IDS), st.builds(p.Pubrel, IDS), st.builds(p.Pubrec, IDS),
    st.just(p.Pingreq()), st.just(p.Disconnect()), st.just(p.Connect(5, "again")),
)
STEP = st.one_of(
    st.tuples(st.just("packet"), PACKETS, st.integers(4, 5)),
    st.tuples(st.just("bytes"), st.binary(max_size=40), st.just(0)),
    st.tuples(st.just("sync"), st.none(), st.just(0)),
    st.tuples(st.just("timer"), st.none(), st.just(0)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.integers(4, 5), connect_first=st.booleans(), steps=st.lists(STEP, max_size=25),
       cut=st.integers(1, 7))
def test_nothing_raises_and_the_others_are_served(version, connect_first, steps, cut):
    g = Gate()
    g.connect(9)
    g.send(9, p.Subscribe(1, (p.TopicFilter("ok/#", 1),)))
    g.gw.expect(1, True)
    g.feed(Accepted(g.now, 1))
    stream = encode(p.Connect(version, "fuzz", keep_alive_s=1), version) if connect_first else b""
    for kind, what, level in steps:
        if kind == "packet":
            try:
                stream += encode(what, level)
            except (ValueError, AssertionError, OverflowError):
                continue  # (a packet the encoder will not write)
        elif kind == "bytes":
            stream += what
        else:
            for i in range(0, len(stream), cut):
                g.now += 1
                g.feed(Received(g.now, g.h.wall_us, 1, stream[i:i + cut]))
            stream = b""
            if kind == "sync" and g.h.unsynced:
                g.sync()
            elif kind == "timer":
                g.now += S
                g.feed(TimerFired(g.now, g.h.wall_us))
        session = g.gw.sessions.get(1)
        event(f"state {session.state if session else None}")
        if session is not None:
            deliveries = session.machine.deliveries
            assert len(deliveries.in_flight) <= deliveries.window
    g.feed(ConnectionLost(g.now, 1))
    g.h.sent.pop(9, None)
    g.send(9, p.Publish("ok/1", b"fine", 1, packet_id=7))
    g.sync()
    assert [type(m) for m in g.answers(9)] == [p.Puback, p.Publish]
