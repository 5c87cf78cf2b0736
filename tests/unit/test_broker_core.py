"""The broker core driven input by input: acks only after sync, fan-out, catch-up, gaps, errors."""

import msgpack

from tidings.core.config import BrokerConfig
from tidings.core.inputs import LogRead, Received, WriteSynced
from tidings.core.wire import messages
from tidings.core.wire.frames import frame
from tidings.core.wire.types import ClientType

from .core_harness import Harness, delivered, of_type, refused


def welcome(h: Harness, conn: int) -> None:
    assert isinstance(h.inbox(conn)[0], messages.Welcome)


def test_publish_is_acknowledged_only_after_the_sync():
    h = Harness()
    h.connect(1)
    welcome(h, 1)
    h.publish(1, ("a/b", b"x", {"k": 1}), ("a/c", b"y", {}))
    assert h.inbox(1) == []  # appended, not yet durable
    assert len(h.records) == 2
    h.sync()
    (ack,) = of_type(h.inbox(1), messages.Ack)
    assert ack.seq == 0 and ack.pubend == "p-test"
    assert ack.ticks == [t for t, _ in h.records]
    assert ack.ticks[0] < ack.ticks[1]


def test_ticks_follow_the_clock_and_stay_strictly_increasing():
    h = Harness(wall_us=5_000_000)
    h.connect(1)
    h.publish(1, ("a", b"", {}), ("a", b"", {}), ("a", b"", {}))
    ticks = [t for t, _ in h.records]
    assert ticks[0] >= 5_000_000 and ticks == sorted(set(ticks))
    h.wall_us = 10  # the clock went backwards (e.g. after a restart)
    h.publish(1, ("a", b"", {}))
    assert h.records[-1][0] == ticks[-1] + 1


def test_live_subscribers_get_matching_events_once_after_sync():
    h = Harness()
    h.connect(1)
    h.connect(2)
    h.connect(3)
    s_all = h.subscribe(2, "nodes/#")
    s_hot = h.subscribe(3, "nodes/+/load", "load > 2")
    h.inbox(2)
    h.inbox(3)
    h.publish(1, ("nodes/h1/load", b"", {"load": 3.5}), ("nodes/h1/mem", b"", {"free": 1}),
              ("nodes/h2/load", b"", {"load": 1.0}), ("other", b"", {}))
    assert h.inbox(2) == [] and h.inbox(3) == []
    h.sync()
    t = [tick for tick, _ in h.records]
    assert delivered(h.inbox(2)) == [(s_all, t[0]), (s_all, t[1]), (s_all, t[2])]
    assert delivered(h.inbox(3)) == [(s_hot, t[0])]


def test_subscribe_from_start_reads_the_log_then_turns_live():
    h = Harness(BrokerConfig(log_read_bytes_max=200))
    h.connect(1)
    h.publish(1, *[("a", b"x" * 50, {"i": i}) for i in range(20)])
    h.sync()
    h.connect(2)
    sub = h.subscribe(2, "a", "i >= 5", start="start")
    h.serve_reads()
    got = [tick for _, tick in delivered(h.inbox(2))]
    assert got == [t for t, _ in h.records][5:]
    assert h.broker.local.subends[1].live
    h.publish(1, ("a", b"", {"i": 99}))
    h.sync()
    assert delivered(h.inbox(2)) == [(sub, h.records[-1][0])]


def test_a_blocked_subscriber_catches_up_from_the_log_without_loss():
    h = Harness(BrokerConfig(log_read_bytes_max=300))
    h.connect(1)
    h.connect(2)
    sub = h.subscribe(2, "#")
    h.publish(1, ("a", b"", {"n": 0}))
    h.sync()
    h.block(2, True)
    for n in range(1, 30):
        h.publish(1, ("a", b"y" * 20, {"n": n}))
        h.sync()
    assert h.broker.status()["catchup_readers"] == 1
    assert h.reads == []  # no read while the connection is blocked
    h.block(2, False)
    h.serve_reads()
    h.publish(1, ("a", b"", {"n": 30}))
    h.sync()
    got = [tick for s, tick in delivered(h.inbox(2)) if s == sub]
    assert got == [t for t, _ in h.records]


def test_start_before_released_ticks_gets_an_explicit_gap_first():
    h = Harness()
    h.connect(1)
    h.publish(1, *[("a", b"", {"i": i}) for i in range(10)])
    h.sync()
    ticks = [t for t, _ in h.records]
    h.released_through = ticks[3]
    h.connect(2)
    sub = h.subscribe(2, "a", start=0)
    h.serve_reads()
    msgs = h.inbox(2)
    gap = of_type(msgs, messages.Gap)[0]
    assert (gap.sub, gap.after, gap.through) == (sub, 0, ticks[3])
    assert msgs.index(gap) < msgs.index(of_type(msgs, messages.Events)[0])
    assert [t for _, t in delivered(msgs)] == ticks[4:]


def test_start_at_the_oldest_retained_event_is_not_a_gap():
    h = Harness()
    h.connect(1)
    h.publish(1, *[("a", b"", {}) for _ in range(5)])
    h.sync()
    h.released_through = h.records[1][0]
    h.connect(2)
    h.subscribe(2, "a", start="start")
    h.serve_reads()
    msgs = h.inbox(2)
    assert of_type(msgs, messages.Gap) == []
    assert len(delivered(msgs)) == 3


def test_bounded_read_ends_with_end():
    h = Harness()
    h.connect(1)
    h.publish(1, *[("a", b"", {}) for _ in range(6)])
    h.sync()
    ticks = [t for t, _ in h.records]
    h.connect(2)
    sub = h.subscribe(2, "a", start=ticks[1], end=ticks[4])
    h.serve_reads()
    msgs = h.inbox(2)
    assert [t for _, t in delivered(msgs)] == ticks[2:5]
    assert of_type(msgs, messages.End) == [messages.End(sub, ticks[4])]
    assert h.broker.local.subends == {}


def test_bad_events_are_rejected_one_by_one_and_the_rest_is_logged():
    h = Harness(BrokerConfig(event_bytes_max=10))
    h.connect(1)
    h.inbox(1)
    body = msgpack.packb([ClientType.PUBLISH, 7, [["a/+", {}, b""], ["ok", {}, b""], ["ok", {}, b"x" * 11],
                                                ["ok", {"k": [1]}, b""], "junk", ["ok", {}, "text"]]])
    h.send(1, frame(body))
    h.sync()
    msgs = h.inbox(1)
    errors = {seq: e.code for seq, e in refused(msgs).items()}
    assert errors == {7: "bad-channel", 9: "event-too-large", 10: "bad-attributes", 11: "bad-message",
                      12: "bad-message"}
    assert len(of_type(msgs, messages.Error)) == 4  # one per reason: both bad messages in one
    (ack,) = of_type(msgs, messages.Ack)
    assert [t is not None for t in ack.ticks] == [False, True, False, False, False, False]
    assert len(h.records) == 1


def test_protocol_errors():
    h = Harness(BrokerConfig(frame_bytes_max=8192, event_bytes_max=1024))
    h.connect(1, hello=False)
    h.send(1, messages.subscribe(messages.Subscribe(1, "a", None, "now", 0, None)))
    assert of_type(h.inbox(1), messages.Error)[0].code == "handshake" and 1 in h.closed
    h.connect(2)
    h.inbox(2)
    h.send(2, frame(b"\xc1garbage"))
    h.send(2, frame(msgpack.packb([42])))
    codes = [e.code for e in of_type(h.inbox(2), messages.Error)]
    assert codes == ["bad-message", "unknown-message"] and 2 not in h.closed
    sub, wire = h.sessions[2].subscribe("a")
    h.send(2, wire.replace(b"\xa1a", b"\xa1#", 1)[:0] + messages.subscribe(
        messages.Subscribe(sub, "a/#/x", None, "now", 0, None)))
    assert of_type(h.inbox(2), messages.Error)[0].code == "bad-pattern"
    h.send(2, messages.subscribe(messages.Subscribe(9, "a", "x >", "now", 0, None)))
    err = of_type(h.inbox(2), messages.Error)[0]
    assert err.code == "bad-filter" and "position" in err.message and err.context == {"sub": 9}
    h.send(2, b"\x00\x01\x00\x00")
    assert of_type(h.inbox(2), messages.Error)[0].code == "frame-too-large" and 2 in h.closed


def test_handshake_timeout_and_version():
    h = Harness(BrokerConfig(handshake_timeout_ns=1000))
    h.connect(1, hello=False)
    h.connect(2)
    assert h.broker.next_deadline() == 1000
    h.timer(1000)
    assert of_type(h.inbox(1), messages.Error)[0].code == "handshake-timeout"
    assert h.closed == {1}
    h.connect(3, hello=False)
    h.send(3, messages.hello("svc", "i", version=99))
    assert of_type(h.inbox(3), messages.Error)[0].code == "version-mismatch" and 3 in h.closed


def test_lost_connections_drop_their_subscriptions():
    h = Harness()
    h.connect(1)
    h.connect(2)
    h.subscribe(2, "#")
    h.publish(2, ("a", b"", {}))
    h.lost(2)
    h.sent.pop(2)
    h.sync()  # the ack for a closed connection is dropped, nothing breaks
    assert h.broker.status()["subscriptions"] == 0 and len(h.broker.local.index) == 0
    h.publish(1, ("a", b"", {}))
    h.sync()
    assert 2 not in h.sent


def test_unsubscribe_and_duplicate_ids():
    h = Harness()
    h.connect(1)
    sub = h.subscribe(1, "a")
    h.send(1, messages.subscribe(messages.Subscribe(sub, "b", None, "now", 0, None)))
    assert of_type(h.inbox(1), messages.Error)[0].code == "subscription-exists"
    h.send(1, messages.unsubscribe(sub))
    refused = h.broker.status()["client_errors"]
    h.send(1, messages.unsubscribe(sub))  # closed already: what it asks for holds, nothing to answer
    h.send(1, messages.unsubscribe(sub + 7, forget=True))  # never opened: the same
    assert h.inbox(1) == [] and h.broker.status()["client_errors"] == refused
    h.publish(1, ("a", b"", {}))
    h.sync()
    assert delivered(h.inbox(1)) == []


def test_a_read_finishing_while_blocked_does_not_turn_the_subscriber_live():
    """Found by the simulator: a catch-up read in flight when SendBlocked arrives reaches the tail."""
    h = Harness(BrokerConfig(send_queue_bytes_max=4096, log_read_bytes_max=4000))
    h.connect(1)
    h.publish(1, *[("a", b"x" * 3000, {}) for _ in range(3)])
    h.sync()
    h.connect(2)
    sub = h.subscribe(2, "#", start="start")
    first = h.reads.pop(0)
    h.feed(LogRead(0, first.reader, h.records[:2], h.state()))
    h.block(2, True)
    h.serve_reads()  # the read issued before the block reaches the durable tail
    assert not h.broker.local.subends[1].live
    h.inbox(2)
    h.publish(1, ("a", b"late", {}))
    h.sync()
    assert delivered(h.inbox(2)) == [], "nothing is queued to a blocked connection"
    h.block(2, False)
    h.serve_reads()
    assert delivered(h.inbox(2)) == [(sub, h.records[-1][0])]
    assert h.broker.local.subends[1].live


def test_coalesce_sends_joins_per_connection_and_flushes_before_disconnect():
    from tidings.core.effects import Append, Disconnect, Send, Sync, coalesce_sends

    effects = [Send(1, b"a"), Append(1, []), Send(2, b"x"), Send(1, b"b"), Disconnect(2, "bye"),
               Send(2, b"late"), Sync(1)]
    assert coalesce_sends(effects) == [Append(1, []), Send(2, b"x"), Disconnect(2, "bye"), Sync(1),
                                       Send(1, b"ab"), Send(2, b"late")]


def test_hello_and_an_oversized_frame_in_one_chunk():
    h = Harness(BrokerConfig(frame_bytes_max=8192, event_bytes_max=1024))
    h.connect(1, hello=False)
    h.send(1, h.sessions[1].hello() + b"\x00\x01\x00\x00")
    msgs = h.inbox(1)
    assert isinstance(msgs[0], messages.Welcome) and msgs[1].code == "frame-too-large" and 1 in h.closed


def test_a_failed_log_read_ends_the_subscription_with_an_error():
    from tidings.core.inputs import ReadFailed

    h = Harness()
    h.connect(1)
    h.publish(1, ("a", b"", {}))
    h.sync()
    h.connect(2)
    sub = h.subscribe(2, "a", start="start")
    read = h.reads.pop()
    h.feed(ReadFailed(0, read.reader, "LogCorruptError: checksum mismatch"))
    err = of_type(h.inbox(2), messages.Error)[0]
    assert err.code == "log-unreadable" and err.context == {"sub": sub} and "checksum" in err.message
    assert h.broker.local.subends == {}


def test_a_big_group_commit_reaches_a_live_subscriber_in_bounded_frames():
    h = Harness()
    h.connect(1)
    h.connect(2)
    sub = h.subscribe(2, "bulk")
    h.inbox(2)
    for _ in range(6):  # six publish batches of 1 MiB, made durable by one sync
        h.publish(1, *[("bulk", b"p" * 1000, {}) for _ in range(1000)])
    h.sync()
    frames = h.sent[2]
    assert len(frames) >= 6
    assert max(len(f) for f in frames) < messages.EVENTS_FRAME_BYTES_TARGET + 2000
    assert delivered(h.inbox(2)) == [(sub, t) for t, _ in h.records]


def test_the_client_accepts_frames_up_to_the_brokers_limit():
    from tidings.core.session.client_session import ClientSession

    s = ClientSession("svc", "i")
    s.receive(messages.welcome({"pubend": "p", "frame_bytes_max": 64 << 20, "event_bytes_max": 32 << 20}))
    big = messages.events(1, [messages.msgpack.packb(["p", 1, "a", {}, "s", "i", b"x" * (20 << 20)])])
    (msg,) = s.receive(big)
    assert len(msg.records[0][6]) == 20 << 20


def test_publishers_are_not_read_while_too_much_waits_for_the_disk():
    from tidings.core.effects import PauseReading, ResumeReading

    h = Harness(BrokerConfig(pending_sync_bytes_max=10_000))
    h.connect(1)
    h.connect(2)
    wire = h.sessions[1].publish([h.sessions[1].check_event("a", b"x" * 6000)])[0][2]
    effects = h.broker.handle(Received(0, 10**6, 1, wire))
    h.apply(effects)
    assert not any(isinstance(e, PauseReading) for e in effects)
    h.publish(2, ("a", b"y" * 6000, {}))
    assert h.broker.status()["paused_publishers"] == 1 and h.broker.status()["pending_sync_bytes"] > 10_000
    effects = h.broker.handle(WriteSynced(0, 2, h.state()))
    assert ResumeReading(2) in effects and h.broker.status()["pending_sync_bytes"] == 0


def test_bulk_read_sends_the_matching_records_as_logged_then_end():
    # ticks of today (past 2**32) so that channels are read in place; several log reads, each its own RECORDS
    h = Harness(BrokerConfig(log_read_bytes_max=200), wall_us=1_764_000_000_000_000)
    h.connect(1)
    h.publish(1, *[(f"{'ab'[i % 2]}/{i}", b"" if i % 3 else b"p", {"i": i, "up": i % 4 == 0})
                   for i in range(30)])
    h.publish(1, ("$sys/a", b"", {}))  # a wildcard-led pattern never matches a `$` channel
    h.sync()
    ticks = [t for t, _ in h.records]
    h.connect(2)
    sessions = h.sessions[2]
    sub, wire = sessions.read("a/#", None, ticks[1], ticks[-1])
    h.send(2, wire)
    h.serve_reads()
    msgs = h.inbox(2)
    records = of_type(msgs, messages.Records)
    assert len(records) > 1 and all(r.sub == sub for r in records)
    blob = b"".join(r.blob[1 if r.count < 16 else 3:] for r in records)  # each without its array header
    assert blob == b"".join(rec for t, rec in h.records[2:30] if msgpack.unpackb(rec)[2].startswith("a/"))
    assert sum(r.count for r in records) == 14
    assert of_type(msgs, messages.End) == [messages.End(sub, ticks[-1])]
    assert of_type(msgs, messages.Events) == [] and h.broker.local.subends == {}
    sub, wire = sessions.read("#", "i >= 20 and up = true", 0, ticks[-1])  # a filter, at the broker
    h.send(2, wire)
    h.serve_reads()
    records = of_type(h.inbox(2), messages.Records)
    assert [f[3]["i"] for r in records for f in msgpack.unpackb(r.blob)] == [20, 24, 28]


def test_bulk_read_reports_released_ticks_as_a_gap():
    h = Harness()
    h.connect(1)
    h.publish(1, *[("a", b"", {}) for _ in range(6)])
    h.sync()
    ticks = [t for t, _ in h.records]
    h.released_through = ticks[2]
    h.connect(2)
    sub, wire = h.sessions[2].read("a", None, 0, ticks[-1])
    h.send(2, wire)
    h.serve_reads()
    msgs = h.inbox(2)
    assert of_type(msgs, messages.Gap) == [messages.Gap(sub, 0, ticks[2], "p-test")]
    assert [f[1] for r in of_type(msgs, messages.Records) for f in msgpack.unpackb(r.blob)] == ticks[3:]


def test_malformed_bulk_reads_get_a_clear_error_and_the_broker_serves_on():
    h = Harness()
    h.connect(1)
    h.publish(1, ("a", b"", {}))
    h.sync()
    h.inbox(1)
    read = ClientType.READ
    bad = [[read, 1, "a", None, 0], [read, 1, "a", None, -1, 5], [read, 1, 7, None, 0, 5],
           [read, "1", "a", None, 0, 5], [read, 1, "a", 3, 0, 5], [read, 1, "a", None, 0, "end"]]
    for body in bad:
        h.send(1, frame(msgpack.packb(body)))
    assert len(of_type(h.inbox(1), messages.Error)) == 1  # the next bad one is held for the refusal window
    h.run_until(h.now + len(bad) * BrokerConfig().refusal_window_ns)  # then one refused message a window
    errors = of_type(h.inbox(1), messages.Error)
    assert [e.code for e in errors] == ["bad-message"] * (len(bad) - 1)
    assert "READ after" in errors[0].message and "READ pattern" in errors[1].message
    for pattern, flt, code in (("a/#/b", None, "bad-pattern"), ("a", "x >", "bad-filter")):
        h.send(1, messages.read(messages.Read(3, pattern, flt, 0, 5)))
        h.run_until(h.now + 1_000_000_000)
        (err,) = of_type(h.inbox(1), messages.Error)
        assert err.code == code and err.context == {"sub": 3}
    _, wire = h.sessions[1].read("a", None, 0, h.records[-1][0])
    h.send(1, wire)
    h.send(1, wire)  # the same id again, while the first is open
    h.serve_reads()
    msgs = h.inbox(1)
    assert [e.code for e in of_type(msgs, messages.Error)] == ["subscription-exists"]
    assert sum(r.count for r in of_type(msgs, messages.Records)) == 1 and 1 not in h.closed
