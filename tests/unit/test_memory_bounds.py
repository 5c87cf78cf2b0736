"""Every byte a connection makes the broker hold is bounded (issue 18, docs/security.md).

The frame decoder grows with what arrived, not with a declared length, and judges each frame by the
limit in force when it is pulled; `PartialFrames` keeps the bytes of partial frames under one budget
(checked against a plain reference) with a progress deadline per holder; and the broker core, driven
through its inputs, closes a connection whose replies overflow its send queue, stops reading one
over its high-water mark, refuses a large frame before the handshake, and closes partial frames
that stall or break the budget, for client and peer connections alike.
"""

from __future__ import annotations

import itertools
import random
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core_harness import Harness
from tidings.core import errors
from tidings.core.config import BrokerConfig, ConfigError
from tidings.core.effects import Connect, Disconnect, PauseReading, ResumeReading, Send
from tidings.core.inputs import Accepted, Received, SendBlocked, SendDrained, TimerFired, WriteSynced
from tidings.core.links.link import PeerConfig, PeerMessage
from tidings.core.links.peer_links import PeerLinks
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire import decoders, messages, peer
from tidings.core.wire.frames import HEADER_BYTES, FrameDecoder, PartialFrames, frame
from tidings.core.wire.types import Layer, LinkType

KIB = 1024
MIB = 1024 * KIB


def bodies_of(data: bytes) -> list[bytes]:
    return FrameDecoder(1 << 30).feed(data)


def errors_to(h: Harness, conn: int) -> list[str]:
    return [m.code for m in map(decoders.decode_broker_message, bodies_of(b"".join(h.sent.get(conn, []))))
            if isinstance(m, messages.Error)]


# ---- the decoder --------------------------------------------------------------------------------


@settings(max_examples=200)
@given(bodies=st.lists(st.binary(max_size=300), max_size=20), cuts=st.lists(st.integers(0, 7000), max_size=12))
def test_any_cutting_of_a_stream_gives_the_same_frames_and_holds_only_what_arrived(bodies, cuts):
    stream = b"".join(frame(b) for b in bodies)
    decoder = FrameDecoder(1000)
    got: list[bytes] = []
    pulled = 0
    edges = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    for lo, hi in itertools.pairwise(edges):
        got += decoder.feed(stream[lo:hi])
        pulled = sum(HEADER_BYTES + len(b) for b in got)
        assert decoder.held_bytes == hi - pulled  # exactly the bytes not yet a whole frame
    assert got == bodies and decoder.failure is None


@given(declared=st.integers(HEADER_BYTES, 8 * MIB), sent=st.integers(0, 4096))
def test_a_declared_length_allocates_nothing(declared, sent):
    decoder = FrameDecoder(8 * MIB)
    assert decoder.feed(struct.pack(">I", declared) + b"x" * min(sent, declared - 1)) == []
    assert decoder.held_bytes == HEADER_BYTES + min(sent, declared - 1)


def test_the_limit_in_force_when_a_frame_is_pulled_judges_it():
    big = frame(b"p" * 20_000)
    decoder = FrameDecoder(16 * KIB, "hello_frame_bytes_max")
    decoder.push(frame(b"hello") + big)
    assert decoder.pull() == b"hello"
    decoder.limit(8 * MIB, "frame_bytes_max")  # the handshake is done
    assert decoder.pull() == b"p" * 20_000
    streaming = FrameDecoder(16 * KIB, "hello_frame_bytes_max", final=False)
    streaming.push(frame(b"hello") + big + big)
    got = []
    for body in streaming.frames():  # one at a time until the handshake raises the limit
        got.append(body)
        streaming.limit(8 * MIB, "frame_bytes_max")
    assert got == [b"hello", b"p" * 20_000, b"p" * 20_000] and streaming.failure is None
    refused = FrameDecoder(16 * KIB, "hello_frame_bytes_max")
    assert refused.feed(big) == [] and refused.held_bytes == 0
    assert refused.failure is not None and refused.failure.code == errors.FRAME_TOO_LARGE
    assert "hello_frame_bytes_max=16384" in str(refused.failure)


# ---- the budget of partial frames ---------------------------------------------------------------


@settings(max_examples=200)
@given(updates=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 300), st.booleans()), max_size=60))
def test_partial_frames_stay_within_their_budget(updates):
    budget = PartialFrames(500, 10)
    reference: dict[int, int] = {}
    for conn, held, lost in updates:
        if lost:
            budget.forget(conn)
            reference.pop(conn, None)
            continue
        growth_fits = held <= reference.get(conn, 0) or sum(reference.values()) - reference.get(conn, 0) + held <= 500
        assert budget.update(0, conn, held) == growth_fits
        if growth_fits:
            reference[conn] = held
        else:  # the broker closes that connection
            budget.forget(conn)
            reference.pop(conn, None)
        reference = {c: n for c, n in reference.items() if n}
        assert budget.held == reference and budget.held_bytes == sum(reference.values()) <= 500


def test_a_partial_frame_must_keep_arriving():
    budget = PartialFrames(1000, 10)
    budget.update(0, 1, 5)
    budget.update(0, 2, 5)
    budget.update(8, 1, 7)  # progress: its deadline moves on, without a new timer
    assert budget.next_deadline() == 10
    assert budget.overdue(10) == [2]
    assert budget.next_deadline() == 18
    budget.wait(17, 1)  # not read by our choice
    assert budget.overdue(18) == [] and budget.overdue(27) == [1]
    budget.update(30, 3, 4)
    budget.update(31, 3, 0)  # the frame completed: no deadline
    assert budget.next_deadline() is None


# ---- client connections in the broker core ------------------------------------------------------


def small(**kw: Any) -> BrokerConfig:
    return BrokerConfig(**{"send_queue_overflow_bytes_max": 64 * KIB, "partial_frames_bytes_max": 64 * KIB,
                           "frame_progress_timeout_ns": 1000, **kw})


def test_replies_that_overflow_the_send_queue_close_the_connection():
    h = Harness(small())
    h.connect(1)
    h.sent.clear()
    one = messages.status_request(1)
    h.send(1, one * 100_000)
    sent = b"".join(h.sent[1])
    assert errors_to(h, 1)[-1] == errors.SEND_QUEUE_OVERFLOW and 1 in h.closed
    largest = max(len(b) for b in bodies_of(sent)) + HEADER_BYTES
    assert len(sent) <= 64 * KIB + 2 * largest + 1024  # the bound, one reply, the closing ERROR
    h.sent.clear()
    h.send(1, one)
    assert 1 not in h.sent  # nothing more is read


@pytest.mark.parametrize("flood", ["empty frames", "bad messages", "hellos"])
def test_a_flood_of_refused_frames_is_held_unread_not_answered(flood):
    """Refusals are coalesced (core/broker/refusals.py): the second within the refusal window holds the
    connection, so the rest of the flood stays unread bytes, and each window answers at most one
    ERROR for it, well within the send queue's bound."""
    h = Harness(small())
    h.connect(1)
    h.sent.clear()
    one = {"empty frames": b"\0\0\0\0", "bad messages": frame(msgpack.packb([99, 1])),
           "hellos": messages.hello("x", "y")}[flood]
    effects = h.broker.handle(Received(h.now, 1, 1, one * 100_000))
    h.apply(effects)
    assert PauseReading(1) in effects and 1 not in h.closed
    assert len(errors_to(h, 1)) == 1  # the first refusal; the second is held with the connection
    for _ in range(5):  # each window: the held ERROR (with its count), then the next one held
        h.timer(h.broker.next_deadline() or 0)
    sent = b"".join(h.sent[1])
    assert len(errors_to(h, 1)) == 6 and len(sent) <= 6 * 1024 and 1 not in h.closed


def test_replies_within_the_bound_leave_the_connection_open():
    h = Harness(small())
    h.connect(1)
    for _ in range(50):  # each read starts a fresh allowance while the queue is under its mark
        h.send(1, messages.status_request(1) * 5)
    assert 1 not in h.closed and errors_to(h, 1) == []


def test_a_connection_over_its_high_water_mark_is_not_read_until_it_drains():
    h = Harness(small())
    h.connect(1)
    assert h.broker.handle(SendBlocked(0, 1)) == [PauseReading(1)]
    h.sent.clear()
    for _ in range(200):  # bytes that arrived before the pause took effect wait unread, as bytes
        h.send(1, messages.status_request(1))
    assert 1 not in h.sent and h.broker.reading.partials.held_bytes == 0
    h.feed(SendDrained(0, 1))  # then they are handled, and their replies still count
    assert errors_to(h, 1)[-1] == errors.SEND_QUEUE_OVERFLOW
    h2 = Harness(small())
    h2.connect(2)
    h2.broker.handle(SendBlocked(0, 2))
    h2.sent.clear()
    h2.send(2, messages.status_request(1) * 3)
    assert 2 not in h2.sent
    effects = h2.broker.handle(SendDrained(0, 2))
    assert effects[-1] == ResumeReading(2) and [type(e) for e in effects[:-1]] == [Send] * 3
    for _ in range(40):  # drained: each read has its allowance again
        h2.send(2, messages.status_request(1) * 3)
    assert 2 not in h2.closed


def test_a_blocked_connection_stays_unread_whatever_else_would_resume_it():
    h = Harness(small(pending_sync_bytes_max=10))
    h.connect(1)
    h.publish(1, ("a/b", b"x" * 100, {}))  # over pending_sync_bytes_max: the intake pauses it
    h.broker.handle(SendBlocked(0, 1))
    h.apply([])
    token = max(h.unsynced)
    effects = h.broker.handle(WriteSynced(0, token, h.state()))
    assert ResumeReading(1) not in effects  # the disk caught up, but the send queue has not
    assert h.broker.handle(SendDrained(0, 1)) == [ResumeReading(1)]


def test_a_frame_larger_than_a_hello_is_refused_before_the_handshake():
    h = Harness(small())
    h.feed(Accepted(0, 1))
    h.send(1, struct.pack(">I", 16 * KIB + 1) + b"x")
    assert errors_to(h, 1) == [errors.FRAME_TOO_LARGE] and 1 in h.closed
    assert "hello_frame_bytes_max" in decoders.decode_broker_message(bodies_of(h.sent[1][0])[0]).message
    # after HELLO (in the same read) the connection's frames may be frame_bytes_max long
    h.connect(2, hello=False)
    s = h.sessions[2]
    publish = s.publish([s.check_event("a/b", b"y" * 100 * KIB, {})])[0][2]
    h.send(2, s.hello() + publish)
    h.sync()
    assert [type(m).__name__ for m in h.inbox(2)] == ["Welcome", "Ack"]


def test_partial_frames_past_the_budget_close_the_connection_that_grows():
    h = Harness(small())
    for conn in (1, 2, 3):
        h.connect(conn)
    h.sent.clear()
    h.send(1, struct.pack(">I", 1 * MIB) + b"x" * 40 * KIB)
    h.send(2, struct.pack(">I", 1 * MIB) + b"x" * 20 * KIB)
    assert 1 not in h.closed and 2 not in h.closed
    h.send(2, b"x" * 10 * KIB)  # 70 KiB held in all: over 64 KiB
    assert errors_to(h, 2) == [errors.PARTIAL_FRAMES_BUDGET] and 2 in h.closed
    assert h.broker.reading.partials.held_bytes == 40 * KIB + HEADER_BYTES
    h.send(3, struct.pack(">I", 1 * MIB) + b"x" * 20 * KIB)  # what 2 held is free again
    assert 3 not in h.closed


def test_a_partial_frame_that_stops_arriving_is_closed_unless_the_broker_holds_it_back():
    h = Harness(small())
    h.connect(1)
    h.connect(2)
    h.sent.clear()
    h.send(1, struct.pack(">I", 100) + b"x")
    h.send(2, struct.pack(">I", 100) + b"x")
    h.broker.handle(SendBlocked(0, 2))  # we do not read 2: its frame cannot move
    h.timer(999)
    assert 1 not in h.closed
    h.timer(1000)
    assert errors_to(h, 1) == [errors.FRAME_STALLED] and 1 in h.closed
    assert 2 not in h.closed and errors_to(h, 2) == []
    h.broker.handle(SendDrained(h.now, 2))
    h.timer(h.broker.next_deadline() or 0)
    assert errors_to(h, 2) == [errors.FRAME_STALLED]


def test_a_partial_hello_is_bounded_and_closed_by_the_handshake_timeout():
    h = Harness(small(handshake_timeout_ns=5000))
    h.feed(Accepted(0, 1))
    h.send(1, struct.pack(">I", 16 * KIB) + b"x" * 1000)
    assert h.broker.reading.partials.held_bytes == 1004
    h.timer(1000)
    assert errors_to(h, 1) == [errors.FRAME_STALLED]
    h.lost(1)
    assert h.broker.reading.partials.held_bytes == 0


def test_a_connection_closed_for_another_reason_is_not_closed_again_by_its_stalled_frame():
    h = Harness(small(handshake_timeout_ns=500))
    h.feed(Accepted(0, 1))
    h.send(1, struct.pack(">I", 100) + b"x")
    h.timer(5000)  # the handshake timeout and the frame's deadline, in one wake-up
    assert errors_to(h, 1) == [errors.HANDSHAKE_TIMEOUT]
    h.connect(2)
    h.send(2, struct.pack(">I", 100) + b"x")
    h.send(2, b"\0" * 99 + messages.status_request(1) * 10_000)  # its frame goes on, its replies overflow: closed
    h.timer(10_000)
    assert errors_to(h, 2)[-1] == errors.SEND_QUEUE_OVERFLOW
    assert h.broker.reading.partials.held_bytes == 0


# ---- peer connections ---------------------------------------------------------------------------


def peered(h: Harness, conn: int) -> None:
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    h.feed(Accepted(0, conn))
    h.send(conn, peer.hello(NodeRef(1 << 100, "127.0.0.1:9")))
    assert h.broker.cluster is not None and h.broker.cluster.owns(conn)


def peer_errors(h: Harness, conn: int) -> list[str]:
    return [peer.unpack(b)[1] for b in bodies_of(b"".join(h.sent.get(conn, [])))
            if peer.unpack(b)[0] == LinkType.PEER_ERROR]


def test_a_peers_partial_frames_count_against_the_same_budget():
    h = Harness(small())
    h.connect(1)
    peered(h, 9)
    h.send(1, struct.pack(">I", 1 * MIB) + b"x" * 40 * KIB)
    h.send(9, struct.pack(">I", 1 * MIB) + b"x" * 30 * KIB)
    assert peer_errors(h, 9) == [errors.PARTIAL_FRAMES_BUDGET] and 9 in h.closed
    assert h.broker.reading.partials.held_bytes == 40 * KIB + HEADER_BYTES


def test_a_peers_stalled_frame_is_closed():
    h = Harness(small())
    peered(h, 9)
    h.send(9, struct.pack(">I", 100) + b"x")
    h.timer(10_000)
    assert peer_errors(h, 9) == [errors.FRAME_STALLED] and 9 in h.closed
    assert h.broker.reading.partials.held_bytes == 0


def test_frames_behind_a_peer_hello_are_judged_by_the_hello_limit_until_admitted():
    h = Harness(small())
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    h.feed(Accepted(0, 9))
    big = struct.pack(">I", 16 * KIB + 1)
    h.feed(Received(0, 1, 9, peer.hello(NodeRef(1 << 100, "127.0.0.1:9")) + big))
    assert peer_errors(h, 9) == [errors.FRAME_TOO_LARGE]


def test_a_blocked_peer_link_answers_no_ping():
    h = Harness(small())
    peered(h, 9)
    h.sent.clear()
    h.send(9, peer.ping(1))
    assert [peer.unpack(b)[0] for b in bodies_of(b"".join(h.sent[9]))] == [LinkType.PONG]
    h.feed(SendBlocked(0, 9))
    h.sent.clear()
    h.send(9, peer.ping(2) * 1000)
    assert 9 not in h.sent


def test_effects_are_well_formed_after_any_limit():
    """Whatever closed a connection, it was told why in one ERROR and closed once."""
    h = Harness(small())
    h.connect(1)
    effects = h.broker.handle(Received(0, 1, 1, messages.status_request(1) * 100_000))
    closes = [e for e in effects if type(e) is Disconnect]
    assert len(closes) == 1 and type(effects[-2]) is Send
    h.feed(TimerFired(10**12))


def test_the_limits_are_configuration_keys():
    cfg = BrokerConfig.from_mapping({"hello_frame_bytes_max": 4096, "frame_progress_timeout_ns": 10**9,
                                     "partial_frames_bytes_max": 32 * MIB, "send_queue_overflow_bytes_max": MIB})
    assert (cfg.hello_frame_bytes_max, cfg.peer_config().hello_frame_bytes_max) == (4096, 4096)
    small = BrokerConfig.from_mapping({"frame_bytes_max": 8192, "event_bytes_max": 100})
    assert small.peer_config().hello_frame_bytes_max == 8192  # the smaller of the two applies
    with pytest.raises(ConfigError, match="partial_frames_bytes_max"):
        BrokerConfig.from_mapping({"partial_frames_bytes_max": 0})


def test_a_dialler_reads_large_frames_right_behind_the_welcome():
    """The acceptor flushes what waited for the link right after its PEER_WELCOME: the dialler judges
    those frames by frame_bytes_max, though the WELCOME came under the handshake's limit."""
    me, other = NodeRef(1, "10.0.0.1:1"), NodeRef(2**127, "10.0.0.2:2")
    links = PeerLinks(me, PeerConfig(frame_bytes_max=1 << 20, hello_frame_bytes_max=1024))
    message = [min(Layer.OVERLAY), "x" * 20_000]
    assert links.send(0, other.address, message) == [Connect(other.address)]
    links.connected(0, 5, other.address)
    output = links.received(0, 5, peer.welcome(other) + peer.encode(message))
    assert PeerMessage(other, message) in output
    effects = [e for e in output if type(e) is not PeerMessage]
    assert not [e for e in effects if type(e) is Disconnect]


def test_a_blocked_connections_lease_runs_on_while_its_renewals_wait_unread():
    h = Harness(small(lease_ns=10**9))
    h.connect(1)
    h.subscribe(1, "a/#")
    h.connect(2)
    h.subscribe(2, "b/#")
    h.broker.handle(SendBlocked(0, 1))
    h.timer(2 * 10**9)
    assert errors_to(h, 2)[-1] == errors.LEASE_EXPIRED
    assert errors.LEASE_EXPIRED not in errors_to(h, 1) and h.broker.leases.expired_total == 1
    h.broker.handle(SendDrained(h.now, 1))
    h.timer(h.now + 2 * 10**9)  # read again, it renews or loses its lease as usual
    assert errors_to(h, 1)[-1] == errors.LEASE_EXPIRED


def test_acks_a_blocked_publisher_does_not_read_count_against_its_queue():
    h = Harness(small(send_queue_overflow_bytes_max=4 * KIB))
    h.connect(1)
    s = h.sessions[1]
    for _ in range(400):  # pipelined before its queue filled, acknowledged after
        h.send(1, s.publish([s.check_event("a/b", b"x", {})])[0][2])
    h.broker.handle(SendBlocked(0, 1))
    h.sync()
    assert errors_to(h, 1)[-1] == errors.SEND_QUEUE_OVERFLOW and 1 in h.closed
    h2 = Harness(small(send_queue_overflow_bytes_max=4 * KIB))
    h2.connect(1)
    s2 = h2.sessions[1]
    for _ in range(400):  # the same, read by a client that keeps up: no limit meets it
        h2.send(1, s2.publish([s2.check_event("a/b", b"x", {})])[0][2])
    h2.sync()
    assert 1 not in h2.closed
