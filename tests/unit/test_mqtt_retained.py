"""Retained messages (core/mqtt/retained.py): the store is the last retained publish per topic in the
order (tick, pubend), deleted by an empty payload, whatever order the events arrive in; its limits;
and, in process through the gateway (core/mqtt/gateway.py), a retained PUBLISH reaching a later
subscriber with RETAIN 1, per retain handling."""

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.broker.advice import Reason
from tidings.core.effects import Send
from tidings.core.event import Event
from tidings.core.inputs import ConnectionLost, TimerFired
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.retained import CLOSED, LIVE_COPIES_WINDOW_US, OPEN, RetainedSent, RetainedStore, size_of
from tidings.core.mqtt.subscriptions import MqttSub, MqttSubscriptions
from tidings.core.wire import messages

from .test_mqtt_gateway import Gate


def retained(topic: str, payload: bytes, tick: int, pubend: str = "p1") -> Event:
    return Event(pubend, tick, topic, {"mqtt.retain": True}, "mqtt", "c", payload)


def test_the_newest_wins_and_an_empty_payload_deletes():
    store = RetainedStore()
    assert store.offer(retained("a/b", b"1", 10))
    assert store.offer(retained("a/b", b"2", 20))
    assert not store.offer(retained("a/b", b"0", 15))  # older than 2: ignored
    assert [e.payload for e in store.matching("a/+")] == [b"2"]
    assert store.offer(retained("a/b", b"", 30))
    assert store.matching("a/#") == [] and store.bytes == 0
    assert not store.offer(retained("a/b", b"2", 20))  # a replay of an older one does not come back
    assert not store.offer(retained("a/b", b"x", 30, "p0"))  # the same tick: the pubend decides
    assert store.offer(retained("a/b", b"y", 30, "p2"))


def test_wildcards_match_topics_but_leading_ones_not_dollar_topics():
    store = RetainedStore()
    for topic in ("a", "a/b", "a/b/c", "x/b", "$SYS/load"):
        store.offer(retained(topic, topic.encode(), 1))
    names = lambda f: [e.channel for e in store.matching(f)]  # noqa: E731
    assert names("a/#") == ["a", "a/b", "a/b/c"]
    assert names("+/b") == ["a/b", "x/b"]
    assert names("#") == ["a", "a/b", "a/b/c", "x/b"]
    assert names("$SYS/#") == ["$SYS/load"]
    assert names("a/b") == ["a/b"] and names("nothing") == []


def test_past_the_limits_a_message_is_not_kept():
    one = size_of(retained("t/0", b"x" * 10, 1))
    store = RetainedStore(topics_max=3, bytes_max=2 * one)
    assert store.offer(retained("t/0", b"x" * 10, 1)) and store.offer(retained("t/1", b"x" * 10, 1))
    assert store.offer(retained("t/2", b"x" * 10, 1))  # over the bytes: a tombstone at its order
    assert [e.channel for e in store.matching("t/#")] == ["t/0", "t/1"] and store.bytes == 2 * one
    assert not store.offer(retained("t/3", b"x", 1))  # a fourth topic: not held at all
    assert store.dropped == 2 and len(store.entries) == 3
    assert store.offer(retained("t/0", b"", 2)) and store.offer(retained("t/2", b"x" * 10, 2))  # room again
    assert [e.channel for e in store.matching("t/#")] == ["t/1", "t/2"]


publishes = st.lists(st.tuples(st.sampled_from(["a", "a/b", "c/d", "$s"]), st.sampled_from([b"", b"1", b"22"]),
                               st.integers(0, 5), st.sampled_from(["p1", "p2"])), max_size=30)


@given(publishes, st.randoms(use_true_random=False))
def test_the_store_is_the_last_retained_publish_per_topic_in_any_order(events, rnd):
    """The model: per topic, the publish greatest in (tick, pubend); absent when its payload is empty.
    (A (tick, pubend) names one event: the first of each pair stands.)"""
    unique = {(tick, pubend): (topic, payload, tick, pubend) for topic, payload, tick, pubend in reversed(events)}
    last: dict[str, tuple[tuple[int, str], bytes]] = {}
    for topic, payload, tick, pubend in unique.values():
        if topic not in last or last[topic][0] < (tick, pubend):
            last[topic] = ((tick, pubend), payload)
    model = {topic: payload for topic, (_, payload) in last.items() if payload}
    arrivals = list(unique.values())
    rnd.shuffle(arrivals)
    store = RetainedStore()
    for topic, payload, tick, pubend in arrivals + arrivals[: len(arrivals) // 2]:  # and some twice
        store.offer(retained(topic, payload, tick, pubend))
    assert {t: e.payload for t, e in store.live().items()} == model
    assert store.bytes == sum(size_of(e) for e in store.live().values())


def ready_gate() -> Gate:
    g = Gate()
    g.feed(TimerFired(0, g.h.wall_us))  # the gateway opens its feed on its first input
    assert g.gw.retained.state is OPEN
    return g


def deliveries(g: Gate, conn: int, packet) -> list:
    return [x for x in g.send(conn, packet) if isinstance(x, p.Publish)]


def test_a_retained_publish_reaches_a_later_subscriber_with_the_retain_flag():
    g = ready_gate()
    [connack] = g.connect(1)
    assert connack.properties.retain_available is None  # (absent: available)
    g.send(1, p.Publish("home/t", b"21", 1, retain=True, packet_id=1))
    g.send(1, p.Publish("home/u", b"no", 1, packet_id=2))
    g.sync()
    g.answers(1)
    assert len(g.h.records) == 2 and [e.channel for e in g.gw.retained.store.matching("#")] == ["home/t"]
    figures = g.gw.status()["mqtt"]
    assert (figures["retained_feed"], figures["retained_topics"], figures["retained_dropped"]) == ("open", 1, 0)
    for conn, version in ((2, 5), (3, 4)):
        g.connect(conn, version)
        got = g.send(conn, p.Subscribe(1, (p.TopicFilter("home/+", 1),)))
        assert got[0] == p.Suback(1, (1,))  # SUBACK first, then the retained message
        assert [(x.topic, x.payload, x.retain, x.qos) for x in got[1:]] == [("home/t", b"21", True, 1)]
    again = (p.TopicFilter("home/+", 1, retain_handling=p.RETAIN_SEND_IF_NEW),)
    assert deliveries(g, 2, p.Subscribe(2, again)) == []  # it existed: none
    fresh = (p.TopicFilter("home/#", 0, retain_handling=p.RETAIN_SEND_IF_NEW),)
    assert [(x.topic, x.qos) for x in deliveries(g, 2, p.Subscribe(3, fresh))] == [("home/t", 0)]
    never = (p.TopicFilter("+/t", 1, retain_handling=p.RETAIN_DO_NOT_SEND),)
    assert deliveries(g, 2, p.Subscribe(4, never)) == []
    g.send(1, p.Publish("home/t", b"", 1, retain=True, packet_id=3))  # deleted
    g.sync()
    g.connect(4)
    assert deliveries(g, 4, p.Subscribe(1, (p.TopicFilter("home/#", 1),))) == []


def test_the_feed_leaves_when_the_broker_drains_so_the_drain_does_not_wait_for_it():
    """(The drain of a broker in an overlay waits for its clients to go, after its ADVICE: the
    integration tests' stops are not held up by the feed.)"""
    g = ready_gate()
    assert g.h.broker.reading.open_clients() == 1  # the feed
    feed = g.gw.retained
    assert feed.from_broker(messages.advice(Reason.OVERLOADED.value, [["127.0.0.1:1", 5]])) == []
    assert feed.state is OPEN  # advice to move elsewhere is not for it
    feed.from_broker(messages.advice(Reason.DRAINING.value, [["127.0.0.1:1", 5]]))
    assert feed.state is CLOSED and not feed.available and feed.refusal == "the broker is stopping"
    assert feed.renew() is None and g.gw.status()["mqtt"]["retained_feed"] == "closed"


def test_one_subscribe_gets_at_most_its_share_of_retained_messages(monkeypatch):
    monkeypatch.setattr("tidings.core.mqtt.retained.RETAINED_PER_SUBSCRIBE_MAX", 2)
    g = ready_gate()
    g.connect(1)
    for i in range(3):
        g.send(1, p.Publish(f"many/{i}", b"v", 0, retain=True))
    g.sync()
    assert len(g.gw.retained.store.matching("many/#")) == 3
    g.connect(2)
    got = deliveries(g, 2, p.Subscribe(1, (p.TopicFilter("many/#", 1), p.TopicFilter("many/2", 1))))
    assert [x.topic for x in got] == ["many/0", "many/1"]  # the first by topic, for the whole SUBSCRIBE
    assert [x.qos for x in got] == [0, 0]  # published at QoS 0


def test_a_retained_will_is_kept_as_retained():
    g = ready_gate()
    g.connect(1, will=p.Will("wills/c1", b"gone", 1, retain=True))
    g.feed(ConnectionLost(g.now, 1))  # without DISCONNECT: the will is due
    g.sync()
    g.connect(2)
    got = deliveries(g, 2, p.Subscribe(1, (p.TopicFilter("wills/+", 1),)))
    assert [(x.topic, x.payload, x.retain) for x in got] == [("wills/c1", b"gone", True)]


def test_a_retained_message_leaves_with_what_is_left_of_its_expiry_and_not_after_it():
    g = ready_gate()
    g.connect(1)
    g.send(1, p.Publish("exp/t", b"v", 1, retain=True, packet_id=1, properties=p.Properties(
        message_expiry_interval_s=10)))
    g.sync()
    published_us = g.h.wall_us
    g.h.wall_us = published_us + 4_000_000  # 4 s later (the gateway learns the clock from each input)
    g.connect(2)
    [got] = deliveries(g, 2, p.Subscribe(1, (p.TopicFilter("exp/#", 1),)))
    assert (got.payload, got.properties.message_expiry_interval_s) == (b"v", 6)  # 10 - 4 (and a few µs), rounded up
    g.h.wall_us = published_us + 11_000_000  # past its expiry: a new subscriber gets nothing
    g.connect(3)
    assert deliveries(g, 3, p.Subscribe(1, (p.TopicFilter("exp/#", 1),))) == []


def fields(e: Event) -> list:
    return [e.pubend, e.tick, e.channel, e.attributes, e.service, e.instance, e.payload]


def test_the_live_copy_of_a_retained_copy_sent_is_dropped_and_then_let_go():
    """A subscription sent a/b (p1 @ 20) and c (p2 @ 5) as retained copies: the same events, and older
    ones of those topics from the same pubend, are dropped; others pass; a pubend past its horizon is
    let go, and so is the whole once no pubend is left or the window passed."""
    sent = RetainedSent([retained("a/b", b"2", 20), retained("c", b"c", 5, "p2")], wall_us=1_000)
    assert sent.copy(fields(retained("a/b", b"2", 20))) == ("p1", 20)  # the same event
    assert sent.copy(fields(retained("a/b", b"1", 10))) == ("p1", 10)  # older than the state it was given
    assert sent.copy(fields(retained("a/b", b"x", 3, "p2"))) is None  # another pubend's (p2 kept: 3 <= 5)
    assert sent.copy(fields(retained("a/c", b"x", 15))) is None  # a topic it was not sent
    assert sent.copy(["p1", "not a tick", "a/b"]) is None and sent.copy("junk") is None  # (malformed: passed on)
    assert not sent.over(1_000)
    assert sent.copy(fields(retained("a/b", b"3", 21))) is None and "p1" not in sent.horizon  # p1 moved past
    assert sent.copy(fields(retained("a/b", b"1", 10))) is None  # (p1 let go: nothing of it is looked at)
    sent.silence({"p2": 4})
    assert not sent.over(1_000)
    sent.silence({"p2": 5})
    assert sent.over(1_000)
    timed = RetainedSent([retained("a/b", b"2", 20)], wall_us=1_000)
    assert not timed.over(1_000 + LIVE_COPIES_WINDOW_US) and timed.over(1_001 + LIVE_COPIES_WINDOW_US)


def test_a_persistent_subscription_counts_a_dropped_live_copy_as_done():
    """Its acknowledged prefix moves past the dropped copy (else the session's RELEASE would stall)."""
    subs = MqttSubscriptions()
    entry = MqttSub("a/#", 1, 7, "name", retained_sent=RetainedSent([retained("a/b", b"2", 20)], 1_000))
    subs._add(entry)
    assert entry.durable is not None
    entry.durable.started([0, [["p1", 10]]])
    records = [fields(retained("a/b", b"2", 20)), fields(retained("a/c", b"n", 20)), fields(retained("a/b", b"3", 30))]
    got = subs.deliver(messages.Events(7, records), 5, None, 1_000)
    assert [(x[0][0], x[0][1]) if isinstance(x[0], tuple) else (x[0].topic, x[0].payload) for x in got] == [
        ("a/c", b"n"), ("a/b", b"3")]
    assert entry.retained_sent is None  # p1 moved past: nothing more is looked at
    assert entry.durable.checkpoint is not None and entry.durable.checkpoint.to_wire()[1] == [["p1", 20]]


def test_a_new_subscriber_gets_a_retained_event_once_though_the_reach_back_brings_it_again():
    """Issue 23: a subscription reaches back on other pubends (the clock-skew allowance), so the event
    it was just sent as a retained copy comes again on it as a live delivery (scen2: RETAIN 1, then
    RETAIN 0). Here the reach-back's EVENTS are handed to the session as its broker sends them."""
    g = ready_gate()
    g.connect(1)
    g.send(1, p.Publish("home/t", b"21", 1, retain=True, packet_id=1))
    g.sync()
    [event] = g.gw.retained.store.matching("home/#")
    for conn, version in ((2, 5), (3, 4)):
        g.connect(conn, version)
        got = g.send(conn, p.Subscribe(1, (p.TopicFilter("home/+", 1),)))
        assert [(x.topic, x.payload, x.retain) for x in got[1:]] == [("home/t", b"21", True)]
        session = g.gw.sessions[conn]
        sub = session.subscriptions.subs["home/+"].sub

        def reach_back(*events: Event, session=session, sub=sub, conn=conn) -> list:
            out: list = []
            session.from_broker(messages.events(sub, [msgpack.packb(fields(e)) for e in events]), out, [])
            return g.decoders[conn].feed(b"".join(x.data for x in out if isinstance(x, Send)))

        older = Event(event.pubend, event.tick - 5, "home/t", {"mqtt.retain": True}, "mqtt", "c", b"20")
        assert reach_back(older, event) == []  # older than the copy, and the copy itself: dropped
        other = Event(event.pubend, event.tick, "home/u", {}, "mqtt", "c", b"u")  # (a made-up neighbour)
        newer = Event(event.pubend, event.tick + 1, "home/t", {}, "mqtt", "c", b"22")
        assert [(x.topic, x.payload, x.retain) for x in reach_back(other, newer)] == [
            ("home/u", b"u", False), ("home/t", b"22", False)]
        assert session.subscriptions.subs["home/+"].retained_sent is None  # let go: nothing more per delivery


live_streams = st.lists(st.tuples(st.sampled_from(["a", "a/b", "c"]), st.sampled_from(["p1", "p2", "p3"]),
                                  st.integers(0, 30)), max_size=40)


@given(st.lists(st.tuples(st.sampled_from(["a", "a/b", "c"]), st.sampled_from(["p1", "p2"]), st.integers(0, 30)),
                max_size=3, unique_by=lambda x: x[0]),
       live_streams, st.randoms(use_true_random=False))
def test_a_subscription_drops_exactly_the_live_events_at_or_below_a_copy_it_was_sent(copies, live, rnd):
    """The model: a live event is dropped when it is of a topic sent, from the copy's pubend, at a tick
    at or below the copy's; the live events come in each pubend's tick order, interleaved any way
    (what the let-go of a pubend past its horizon relies on), and some SILENCEs between them."""
    sent = {topic: (pubend, tick) for topic, pubend, tick in copies}
    by_pubend = {pubend: sorted((e for e in live if e[1] == pubend), key=lambda e: e[2])
                 for pubend in ("p1", "p2", "p3")}
    stream: list = []
    while any(by_pubend.values()):
        pubend = rnd.choice([q for q, events in by_pubend.items() if events])
        stream.append(by_pubend[pubend].pop(0))
    held = RetainedSent([retained(topic, b"r", tick, pubend) for topic, pubend, tick in copies], 0)
    kept = []
    for topic, pubend, tick in stream:
        kept += held.live([fields(retained(topic, b"l", tick, pubend))], None)
        if rnd.random() < 0.2:
            held.silence({pubend: tick - 1})  # (what came from it so far, and nothing up to this tick)
    model = [(topic, pubend, tick) for topic, pubend, tick in stream
             if not (topic in sent and sent[topic][0] == pubend and tick <= sent[topic][1])]
    assert [(f[2], f[0], f[1]) for f in kept] == model
