"""Idempotent publish through the broker core: duplicates answered with the original tick, never
before it is durable; bad producer ids and sequences refused per event; the window in time; and any
mix of good and bad events, with or without a producer, answered event by event."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core_harness import Harness, of_type
from tests.unit.core_harness import refused as refused_seqs
from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthPolicy, Limits
from tidings.core.auth.rules import AccessRules
from tidings.core.broker.broker import Broker
from tidings.core.config import BrokerConfig
from tidings.core.inputs import LogState
from tidings.core.wire import messages


def publish(h: Harness, conn: int, producer: Any, *events: list[Any]) -> int:
    seq = 100 * len(h.records) + 1 + len(h.sent.get(conn, []))
    h.send(conn, messages.publish(seq, list(events), producer))
    return seq


def acks(h: Harness, conn: int) -> dict[int, messages.Ack]:
    return {a.seq: a for a in of_type(h.inbox(conn), messages.Ack)}


def ev(pseq: Any, channel: str = "a/b") -> list[Any]:
    return [channel, {}, b"x", pseq]


def test_a_duplicate_gets_the_original_tick_and_waits_for_its_commit() -> None:
    h = Harness()
    h.connect(1)
    h.inbox(1)
    first = publish(h, 1, "p1", ev(0), ev(1), ev(2))
    again = publish(h, 1, "p1", ev(1))  # before the original's group commit
    assert acks(h, 1) == {}  # nothing is acknowledged before the disk says so
    h.sync()
    got = acks(h, 1)
    assert got[again].ticks == [got[first].ticks[1]] and got[again].duplicates == [0]
    assert got[first].duplicates == [] and len(h.records) == 3
    later = publish(h, 1, "p1", ev(2))  # the original is durable: answered at once
    assert acks(h, 1)[later].ticks == [got[first].ticks[2]] and len(h.records) == 3
    assert h.broker.status()["dedup_duplicates"] == 2


def test_a_mixed_batch_logs_only_what_is_new_and_refuses_bad_events() -> None:
    h = Harness()
    h.connect(1)
    h.inbox(1)
    first = publish(h, 1, "p1", ev(5))
    h.sync()
    t5 = acks(h, 1)[first].ticks[0]
    # a duplicate, a new one and its repeat, a bad pseq, a bad channel and its repeat, a new one,
    # one without a pseq
    seq = publish(h, 1, "p1", ev(5), ev(6), ev(6), ev(-1), ev(7, "a/+"), ev(7), ev(8), ["a/b", {}, b"x"])
    h.sync()
    msgs = h.inbox(1)
    ack = of_type(msgs, messages.Ack)[0]
    t6, t8 = ack.ticks[1], ack.ticks[6]
    assert t6 is not None and t8 is not None
    assert ack.ticks == [t5, t6, t6, None, None, None, t8, None] and ack.duplicates == [0, 2]
    assert sorted(s - seq for s in refused_seqs(msgs)) == [3, 4, 5, 7]
    assert len(h.records) == 3  # 5, 6 and 8, once each


def test_bad_producer_ids_are_refused_per_event_and_the_broker_serves_on() -> None:
    h = Harness()
    h.connect(1)
    h.inbox(1)
    for producer in (7, "", "x" * 257, ["p"]):
        seq = publish(h, 1, producer, ev(1), ev(2))
        h.run_until(h.now + 1_000_000_000)  # past the refusal window: each PUBLISH answered at once
        msgs = h.inbox(1)
        assert of_type(msgs, messages.Ack)[0].ticks == [None, None]
        (error,) = of_type(msgs, messages.Error)  # one per reason, naming both events
        assert sorted(refused_seqs(msgs)) == [seq, seq + 1] and "producer id" in error.message
    h.send(1, messages.publish(900, [["a/b", {}, b"plain"]]))
    h.sync()
    assert of_type(h.inbox(1), messages.Ack)[0].ticks[0] is not None


def test_a_duplicate_older_than_the_window_is_logged_again() -> None:
    h = Harness(BrokerConfig(dedup_window_ns=1_000_000))  # 1 ms: 1000 ticks
    h.connect(1)
    h.inbox(1)
    first = publish(h, 1, "p1", ev(1))
    h.sync()
    t1 = acks(h, 1)[first].ticks[0]
    h.wall_us += 998  # the next message is 999 us after the first: inside
    inside = publish(h, 1, "p1", ev(1))
    h.sync()
    assert acks(h, 1)[inside].ticks == [t1]
    h.wall_us += 10
    outside = publish(h, 1, "p1", ev(1))
    h.sync()
    late = acks(h, 1)[outside]
    assert late.ticks[0] is not None and late.ticks[0] > t1 and late.duplicates == []
    assert len(h.records) == 2


def test_events_of_any_shape_are_refused_without_an_exception() -> None:
    h = Harness()
    h.connect(1)
    h.inbox(1)
    shapes = [[["a"], {}, b"x", 1], [{"a": 1}, {}, b"x", 2], ["a/b", [1], b"x", 3], ["a/b", {}, "text", 4],
              ["a/b", {"k": [1]}, b"x", 5], [None, None, None, 6], 7, None]
    seq = publish(h, 1, "p1", *shapes)
    msgs = h.inbox(1)
    assert of_type(msgs, messages.Ack)[0].ticks == [None] * len(shapes)
    assert sorted(s - seq for s in refused_seqs(msgs)) == list(range(len(shapes)))


def test_producer_ids_are_scoped_by_the_clients_service() -> None:
    """Two applications that chose the same producer id: neither's events are taken for the
    other's repeats (which would acknowledge them without logging them)."""
    h = Harness()
    h.connect(1, service="billing")
    h.connect(2, service="audit")
    h.inbox(1), h.inbox(2)
    one = publish(h, 1, "p1", ev(0))
    two = publish(h, 2, "p1", ev(0))
    h.sync()
    a1, a2 = acks(h, 1)[one], acks(h, 2)[two]
    assert a1.duplicates == [] and a2.duplicates == [] and a1.ticks != a2.ticks
    assert len(h.records) == 2
    h.connect(3, service="audit")  # the same service, another connection: a repeat
    h.inbox(3)
    again = publish(h, 3, "p1", ev(0))
    h.sync()
    got = acks(h, 3)[again]
    assert got.ticks == a2.ticks and got.duplicates == [0]


GOOD_CHANNELS = ["a/b", "a/c", "x"]
EVENT_SHAPES = st.one_of(
    st.tuples(st.sampled_from(GOOD_CHANNELS), st.sampled_from([{}, {"k": 1}]), st.binary(max_size=4)).map(list),
    st.tuples(st.sampled_from(["a/+", "", "a//b"]), st.just({}), st.just(b"")).map(list),  # bad channel
    st.tuples(st.sampled_from(GOOD_CHANNELS), st.sampled_from([{"k": [1]}, {"": 1}]), st.just(b"")).map(list),
    st.tuples(st.sampled_from(GOOD_CHANNELS), st.just({}), st.just(b"x" * 65)).map(list),  # too large
    st.sampled_from([None, 7, ["a/b"], ["a/b", {}, "text"]]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(EVENT_SHAPES, st.integers(0, 6)), min_size=1, max_size=12), st.booleans())
def test_any_mix_of_events_is_logged_once_each_and_answered_event_by_event(
        batch: list[tuple[Any, int]], idempotent: bool) -> None:
    """The intake (core/publish/intake.py) on any PUBLISH, plain or with a producer: one tick or None per
    event in the ACK, an ERROR for each event without a tick (but duplicates, which get the tick
    they were logged with), new events logged once each under consecutive ticks, in order."""
    h = Harness(BrokerConfig(event_bytes_max=64))
    h.connect(1)
    h.inbox(1)
    events = [[*e, pseq] if idempotent and isinstance(e, list) else e for e, pseq in batch]
    seq = publish(h, 1, "p1" if idempotent else None, *events)
    h.sync()
    msgs = h.inbox(1)
    (ack,) = of_type(msgs, messages.Ack)
    assert len(ack.ticks) == len(events)
    refused = sorted(s - seq for s in refused_seqs(msgs))
    assert refused == [i for i, t in enumerate(ack.ticks) if t is None]
    logged = [t for t, _ in h.records]
    assert logged == list(range(logged[0], logged[0] + len(logged))) if logged else True
    firsts = [t for i, t in enumerate(ack.ticks) if t is not None and t not in ack.ticks[:i]]
    assert firsts == logged  # each new event logged once, in the order of the PUBLISH
    if not idempotent:
        assert ack.duplicates == [] and len(set(firsts)) == len(firsts) == len(
            [t for t in ack.ticks if t is not None])


def test_a_duplicate_past_the_publishers_rate_is_refused_as_any_event() -> None:
    """The guard's rate limit holds a PUBLISH back until its bucket refills, and refuses what a
    full bucket cannot hold, whatever the dedup window says of it: a duplicate past that gets an
    ERROR and no tick, as a new event does."""
    h = Harness()
    rates = Limits(publish_events_per_s=2, publish_burst_s=1)
    h.broker = Broker(BrokerConfig(), "p-test", LogState(),
                      Guard(AuthPolicy({}, AccessRules([]), None, True, rates), lambda: b"n" * 24))
    h.connect(1)
    h.inbox(1)
    first = publish(h, 1, "p1", ev(0), ev(1))
    h.sync()
    assert None not in acks(h, 1)[first].ticks
    again = publish(h, 1, "p1", ev(5), ev(6), ev(0))  # the same second: the bucket is empty
    assert h.inbox(1) == [] and h.broker.next_deadline() == 1_000_000_000  # waits, unread, for a full bucket
    h.run_until(1_000_000_000)
    h.sync()
    msgs = h.inbox(1)
    ack = of_type(msgs, messages.Ack)[0]
    assert ack.ticks[2] is None and None not in ack.ticks[:2]  # a full bucket holds two: the duplicate is third
    assert sorted(refused_seqs(msgs)) == [again + 2] and refused_seqs(msgs)[again + 2].code == "limit-exceeded"
    assert len(h.records) == 4
