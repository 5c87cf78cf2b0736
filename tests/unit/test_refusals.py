"""Refusals of clients: counted by reason, logged once a second per connection, coalesced into at
most one ERROR per reason and window with the seqs they stand for; floods over an identity's rate
held unread (backpressure) rather than read and refused, and every publish still answered."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthPolicy, Limits
from tidings.core.auth.rules import ANY_IDENTITY, PUBLISH, SUBSCRIBE, AccessRules, Rule
from tidings.core.broker.broker import Broker
from tidings.core.broker.connection import OPEN, ClientConnection, Hold
from tidings.core.broker.refusals import LOG_LINES_KEPT_MAX, ClientErrors, RefusalWindow, seq_ranges
from tidings.core.config import BrokerConfig
from tidings.core.effects import Disconnect, PauseReading, ResumeReading, Send
from tidings.core.inputs import LogState, Received, TimerFired, WriteSynced
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder

from .core_harness import Harness, of_type, refused

SECOND = 1_000_000_000
WINDOW = 100_000_000
CODES = ("bad-message", "forbidden", "limit-exceeded")


def decode(frames: list[bytes]) -> list[messages.Error | messages.Ack]:
    out = []
    for body in FrameDecoder(1 << 20).feed(b"".join(frames)):
        msg = decoders.decode_broker_message(body)
        assert isinstance(msg, messages.Error | messages.Ack)
        out.append(msg)
    return out


def test_seq_ranges():
    assert seq_ranges([]) == []
    assert seq_ranges([3, 4, 5, 9, 11, 12]) == [[3, 5], [9, 9], [11, 12]]


# one step: (ns later, a refusal (code, about events / a subscription / nothing, how many) or an ACK)
steps = st.lists(st.tuples(st.integers(0, WINDOW), st.one_of(
    st.tuples(st.sampled_from(CODES), st.sampled_from(["seq", "sub", ""]), st.integers(1, 4)),
    st.just("ack"))), max_size=60)


@settings(max_examples=300)
@given(steps)
def test_a_window_sends_at_most_one_error_per_reason_and_loses_no_refusal(script):
    """Whatever refusals come, at whatever pace (the connection's window flushed when it says):
    ERRORs of one reason are at least a window apart, every refused seq and subscription is named
    exactly once, the counts add up, and no ACK overtakes an ERROR about a refusal before it."""
    window = RefusalWindow(WINDOW)
    now = next_seq = next_sub = 0
    sent: list[tuple[int, bytes]] = []  # (when, frame)
    seqs_refused: list[int] = []
    subs_refused: list[int] = []
    plain = dict.fromkeys(CODES, 0)
    acks_due: list[int] = []  # for each ACK sent, how many refusals came before it

    def flush_due() -> None:
        at = window.until
        if at is not None and at <= now:
            sent.extend((at, f) for f in window.flush(at))

    for dt, step in script:
        now += dt
        flush_due()
        if step == "ack":
            acks_due.append(len(seqs_refused) + len(subs_refused) + sum(plain.values()))
            frame_ = window.reply(messages.ack(0, "p", []))
            if frame_ is not None:
                sent.append((now, frame_))
            continue
        code, kind, count = step
        seqs = list(range(next_seq, next_seq + count)) if kind == "seq" else None
        sub = next_sub if kind == "sub" else None
        if kind == "seq":
            next_seq += count + 1  # a gap: another PUBLISH's events
            seqs_refused += seqs
        elif kind == "sub":
            next_sub += 1
            subs_refused.append(sub)
            count = 1
        else:
            plain[code] += count
        frame_ = window.error(now, code, "why", count, seqs=seqs, sub=sub)
        if frame_ is not None:
            sent.append((now, frame_))
        assert window.holding == (window.until is not None)
    now += 10 * WINDOW
    flush_due()
    assert not window.holding
    msgs = decode([f for _, f in sent])
    last: dict[str, int] = {}
    named_seqs: list[int] = []
    named_subs: list[int] = []
    counted = dict.fromkeys(CODES, 0)
    errors_seen = 0
    acks = iter(acks_due)
    for (when, _), msg in zip(sent, msgs, strict=True):
        if isinstance(msg, messages.Ack):
            assert errors_seen >= 0 and next(acks) <= errors_seen  # every refusal before it was told
            continue
        assert msg.code not in last or when - last[msg.code] >= WINDOW
        last[msg.code] = when
        ctx = msg.context
        count = ctx.get("count", 1)
        if "seqs" in ctx:
            named = [s for lo, hi in ctx["seqs"] for s in range(lo, hi + 1)]
            assert ctx["seq"] == named[0]
            named_seqs += named
            count -= len(named)
        if "sub" in ctx:
            subs = ctx.get("subs", [ctx["sub"]])
            assert ctx["sub"] == subs[0]
            named_subs += subs
            count -= len(subs)
        assert count >= 0
        counted[msg.code] += count  # refusals about neither
        errors_seen += ctx.get("count", 1)
    assert sorted(named_seqs) == sorted(seqs_refused) and len(set(named_seqs)) == len(named_seqs)
    assert sorted(named_subs) == sorted(subs_refused)
    assert counted == plain


def test_refusals_are_counted_by_reason_and_logged_once_a_second_per_connection():
    errors = ClientErrors()
    errors.refused(0, 1, "svc", "forbidden", "no", 3)
    errors.refused(1, 1, "svc", "bad-message", "junk")
    errors.refused(2, 2, "other", "bad-message", "junk")
    errors.refused(SECOND - 1, 1, "svc", "forbidden", "no")
    (a, b), dropped = errors.take_log()
    assert dropped == 0
    assert (a.conn, a.code, a.count, a.suppressed) == (1, "forbidden", 3, 0)
    assert (b.conn, b.who, b.suppressed) == (2, "other", 0)
    errors.refused(SECOND, 1, "svc", "forbidden", "no")  # a new second: a line, with what it did not log
    (line,), _ = errors.take_log()
    assert (line.count, line.suppressed) == (1, 2)
    errors.refused(SECOND + 1, 1, "svc", "forbidden", "no", 5)
    errors.lost(1, "svc")
    errors.lost(2, "other")  # nothing unlogged
    (gone,), _ = errors.take_log()
    assert (gone.conn, gone.count, gone.suppressed) == (1, 0, 5)
    assert errors.status() == {"client_errors": {"bad-message": 2, "forbidden": 10}}
    for conn in range(3, 3 + LOG_LINES_KEPT_MAX + 5):  # many connections refused at once
        errors.refused(2 * SECOND, conn, "", "handshake-timeout", "late")
    lines, dropped = errors.take_log()
    assert len(lines) == LOG_LINES_KEPT_MAX and dropped == 5 and errors.take_log() == ([], 0)


# ---- the broker: backpressure on a publisher's rate, and the disk ----------------------------------


def limited(rate: int, config: BrokerConfig | None = None, rules: AccessRules | None = None) -> Harness:
    h = Harness(config)
    h.broker = Broker(h.broker.config, "p-test", LogState(),
                      Guard(AuthPolicy({}, rules or AccessRules([]), None, True,
                                       Limits(publish_events_per_s=rate, publish_burst_s=1)), lambda n: b"n" * n))
    return h


def test_a_flood_over_its_rate_waits_unread_and_every_publish_is_answered():
    """A publisher pipelining 50 one-event PUBLISHes at 10 events/s: its burst of 10 is logged at
    once, the 11th waits unread (and with it the rest of what arrived), the connection is not read,
    and each wait lets through what the bucket refilled; nothing is refused, each gets its ACK."""
    h = limited(10)
    s = h.connect(1)
    h.inbox(1)
    wire = b"".join(f for _, _, f in (s.publish([s.check_event("a", b"x")])[0] for _ in range(50)))
    effects = h.broker.handle(Received(0, 10**6, 1, wire))
    h.apply(effects)
    c = h.broker.connections[1]
    assert PauseReading(1) in effects and c.holds == {Hold.RATE: None}
    # the 11th waits decoded, the 39 behind it as bytes in the decoder: read by the runtime, not handled
    assert c.waiting is not None and c.decoder.held_bytes == len(wire) * 39 // 50
    h.sync()
    assert len(of_type(h.inbox(1), messages.Ack)) == 10
    resumed = at = 0
    while (c.waiting or c.decoder.held_bytes) and at < 20 * SECOND:
        at = h.broker.next_deadline()
        effects = h.broker.handle(TimerFired(at, 10**6))
        h.apply(effects)
        h.sync()
        resumed += effects.count(ResumeReading(1))
    acks = of_type(h.inbox(1), messages.Ack)
    assert len(acks) == 40 and all(None not in a.ticks for a in acks)
    assert resumed == 1 and 3 * SECOND <= at <= 4 * SECOND + BrokerConfig().publish_wait_ns_min  # 40 events at 10/s
    assert h.broker.status()["client_errors"] == {}


def test_a_connection_held_for_two_reasons_is_read_again_only_when_both_let_go():
    """The intake (disk) and the refusal window hold one connection at once: the sync that lets
    the disk go reads nothing and resumes nothing; the end of the window does both, once, and the
    ACK held behind the coalesced ERROR comes after it."""
    h = limited(2, BrokerConfig(pending_sync_bytes_max=100, refusal_window_ns=10 * SECOND))
    s = h.connect(1)
    h.inbox(1)
    wire = b"".join(s.publish([s.check_event("a", b"x" * 200)] * 3)[0][2] for _ in range(2))
    effects = h.broker.handle(Received(0, 10**6, 1, wire))  # two PUBLISHes of 3 events; a full bucket holds 2
    h.apply(effects)
    c = h.broker.connections[1]
    assert PauseReading(1) in effects and set(c.holds) == {Hold.DISK} and c.decoder.held_bytes == len(wire) // 2
    h.sync()  # the disk lets go; the second PUBLISH waits for its rate
    assert set(c.holds) == {Hold.RATE}
    (first,) = of_type(h.inbox(1), messages.Error)
    assert first.code == "limit-exceeded" and first.context["count"] == 1  # what a full bucket cannot hold
    h.run_until(SECOND)  # the rate lets go: 2 logged (the disk holds), 1 refused inside the window (held)
    assert set(c.holds) == {Hold.DISK, Hold.REFUSED} and c.waiting is None and c.decoder.held_bytes == 0
    effects = h.broker.handle(WriteSynced(SECOND, max(h.unsynced), h.state()))
    h.unsynced.clear()
    h.apply(effects)
    assert ResumeReading(1) not in effects and set(c.holds) == {Hold.REFUSED}
    assert h.inbox(1) == []  # its ACK waits behind the held ERROR
    effects = h.broker.handle(TimerFired(10 * SECOND, 10**6))
    h.apply(effects)
    assert effects.count(ResumeReading(1)) == 1 and not c.holds
    error, ack = h.inbox(1)
    assert isinstance(error, messages.Error) and isinstance(ack, messages.Ack)
    assert error.context["seqs"] == [[ack.seq + 2, ack.seq + 2]] and ack.ticks[2] is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.sampled_from(["ok", "forbidden", "bad"])), min_size=1,
                max_size=30),
       st.lists(st.sampled_from(["timer", "sync", "more"]), max_size=40))
def test_every_publish_is_answered_whatever_holds_the_connection(publishes, drive):
    """PUBLISHes of good, forbidden and malformed events under a rate, the disk bound and the
    refusal window, driven in any order: PauseReading and ResumeReading alternate, the connection
    is never read while held, and in the end each PUBLISH has its ACK, each refused event named in
    an ERROR before it."""
    rules = AccessRules([Rule(ANY_IDENTITY, PUBLISH, True, "ok/#"), Rule(ANY_IDENTITY, SUBSCRIBE, True, "#")])
    # (its timers jump to the next deadline, with a read cut mid-frame: the partial frame's progress
    # deadline, which test_memory_bounds drives, is put out of the way and never jumped to)
    h = limited(20, BrokerConfig(pending_sync_bytes_max=2000, frame_progress_timeout_ns=10**15), rules)
    s = h.connect(1)
    h.inbox(1)
    wire, expected = [], {}
    for n, kind in publishes:
        events = [[{"ok": "ok/a", "forbidden": "no/a", "bad": "a/+"}[kind], {}, b"x" * 50] for _ in range(n)]
        # the session frames and numbers what it is given (it refuses bad channels in check_event,
        # which these events skip)
        ((seq, count, data),) = s.publish(events)
        wire.append(data)
        expected[seq] = count
    joined = b"".join(wire)
    cut = [0, len(joined) // 3, 2 * len(joined) // 3, len(joined)]
    chunks = [joined[cut[k]:cut[k + 1]] for k in range(3)]  # three reads, cut anywhere (mid-frame too)
    reading, got = True, []

    def step(effects):
        nonlocal reading
        h.apply(effects)
        for e in effects:
            if isinstance(e, PauseReading):
                assert reading
                reading = False
            elif isinstance(e, ResumeReading):
                assert not reading
                reading = True
    wire_in = list(chunks)
    for action in [*drive, *["more", "timer", "sync"] * 200]:
        if action == "more" and wire_in and reading:
            step(h.broker.handle(Received(h.now, 10**6, 1, wire_in.pop(0))))
        elif action == "timer" and h.broker.next_deadline() not in (None, h.broker.reading.partials.next_deadline()):
            h.now = max(h.now, h.broker.next_deadline())
            step(h.broker.handle(TimerFired(h.now, 10**6)))
        elif action == "sync" and h.unsynced:
            token = max(h.unsynced)
            h.unsynced.clear()
            step(h.broker.handle(WriteSynced(h.now, token, h.state())))
        got += h.inbox(1)
        if not wire_in and len(of_type(got, messages.Ack)) == len(expected):
            break
    acks = {a.seq: a for a in of_type(got, messages.Ack)}
    assert sorted(acks) == sorted(expected)
    named = refused(got)
    for seq, ack in acks.items():
        assert len(ack.ticks) == expected[seq]
        for k, tick in enumerate(ack.ticks):
            assert (tick is None) == (seq + k in named)
            if tick is None:  # its ERROR came before its ACK
                assert got.index(named[seq + k]) < got.index(ack)


def test_a_refused_subscription_flood_is_answered_at_most_once_a_window():
    """SUBSCRIBEs refused for one reason as fast as they come: the first ERROR at once, the next
    held with the connection until the window ends, then one ERROR naming it; the rest wait unread."""
    h = Harness()
    h.connect(1)
    h.inbox(1)
    wire = b"".join(messages.subscribe(messages.Subscribe(sub, "a/#/b", None, "now", 0, None)) for sub in range(1, 11))
    effects = h.broker.handle(Received(0, 10**6, 1, wire))
    h.apply(effects)
    (first,) = of_type(h.inbox(1), messages.Error)
    assert first.code == "bad-pattern" and PauseReading(1) in effects
    assert h.broker.connections[1].decoder.held_bytes == len(wire) * 8 // 10  # unread, as bytes
    h.run_until(WINDOW)
    (second,) = of_type(h.inbox(1), messages.Error)
    assert second.context["subs"] == [2] and second.context["count"] == 1
    h.run_until(20 * WINDOW)
    rest = of_type(h.inbox(1), messages.Error)
    assert sorted(sub for e in rest for sub in e.context.get("subs", [e.context["sub"]])) == list(range(3, 11))
    assert h.broker.status()["client_errors"] == {"bad-pattern": 10}


# ---- holds and the memory bounds together (core/broker/connection.py, docs/security.md) -----------------


def test_the_coalesced_errors_and_the_acks_behind_them_count_against_the_send_queue():
    """What a refusal window flushes is charged like any reply: past the overflow bound the
    connection is closed, and that close is counted under its own code."""
    c = ClientConnection(1, 1 << 20, 10, Guard.open(), overflow_bytes_max=40)
    c.decoder.push(messages.hello("svc", "i"))
    body = c.decoder.pull()
    assert body is not None and c.opening(0, body, {})[1] and c.state == OPEN  # WELCOME
    out: list = []
    c.refuse(0, "bad-message", "first", out)
    c.refuse(1, "bad-message", "second", out)  # inside the window: held
    assert len(out) == 1 and not c.reply(messages.ack(0, "p", [1]), out) and len(out) == 1
    c.owed = 0
    flushed: list = []
    c.flush_refusals(WINDOW, flushed)
    sends = [e for e in flushed if isinstance(e, Send)]
    assert len(sends) == 3 and isinstance(flushed[-1], Disconnect)  # the held ERROR, the ACK, the close
    closing = decoders.decode_broker_message(FrameDecoder(1 << 20).feed(sends[-1].data)[0])
    assert isinstance(closing, messages.Error) and closing.code == errors.SEND_QUEUE_OVERFLOW
    assert c.errors.by_reason == {"bad-message": 2, errors.SEND_QUEUE_OVERFLOW: 1}


def test_a_held_connections_unread_frames_are_bytes_and_only_its_partial_frame_stalls():
    """A flood over its rate waits unread in the decoder; only the partial frame behind it counts
    against the budget, and its progress deadline waits while the broker holds the connection;
    once everything whole is handled the partial frame must move again, or the connection is
    closed (frame-stalled), counted by its code."""
    h = limited(10, BrokerConfig(frame_progress_timeout_ns=WINDOW))
    s = h.connect(1)
    h.inbox(1)
    wire = b"".join(s.publish([s.check_event("a", b"x")])[0][2] for _ in range(30))
    h.apply(h.broker.handle(Received(0, 10**6, 1, wire + struct.pack(">I", 500) + b"p" * 100)))
    c = h.broker.connections[1]
    assert c.holds == {Hold.RATE: None} and c.decoder.held_bytes > 104
    assert h.broker.reading.partials.held_bytes == 104  # the header and the 100 bytes of the partial frame
    h.timer(h.broker.reading.partials.next_deadline() or 0)  # held: its frame cannot move, it waits on
    assert 1 not in h.closed
    for _ in range(200):  # the rate lets the 20 waiting PUBLISHes through (2 s), then the frame stalls
        if 1 in h.closed:
            break
        h.timer(h.broker.next_deadline() or 0)
        h.sync()
    assert 1 in h.closed and len(of_type(h.inbox(1), messages.Ack)) == 30
    assert h.broker.status()["client_errors"] == {errors.FRAME_STALLED: 1}
