"""Whatever clients and peers send, `Broker.handle` returns effects and never raises.

Hypothesis drives one broker in an overlay with small limits (trees_max=2, three subscriptions per
connection) through random schedules of client actions (HELLO, subscribes with good and bad
patterns, filters, starts and orders, bulk reads (READ) good and malformed, unsubscribes, publishes
of good and malformed events, random frames and raw bytes, partial frames, flow control, lost
connections) and peer
connections carrying random messages, with timers, syncs and log reads in between. After every
input the broker's bookkeeping still agrees with itself: each connection's subscriptions are the
broker's, each open subscription is in exactly one tree, the tree counts are the sums, and a
refused subscribe (trees_max) left nothing behind.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core_harness import Harness
from tidings.core.config import BrokerConfig
from tidings.core.inputs import Accepted
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire import messages, peer
from tidings.core.wire.frames import frame
from tidings.core.wire.types import ClientType

CONNS = (1, 2, 3)
PEER_CONN = 9
PATTERNS = ("a/#", "b/#", "c/#", "a/x", "a/+/y", "#", "", "a/#/b", "+", 7, None)
FILTERS = (None, "", "load > 2", "load >", "name = 'x' and load < 3", 5, "(((")
STARTS: tuple[Any, ...] = (["now"], ["start"], ["after", 0], ["after", -5], ["after", "x"], ["later"], [], "now")
ORDERS: tuple[Any, ...] = ((), ("publisher",), ("total",), ("sideways",), (3,))

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.text(max_size=6),
                    st.binary(max_size=12))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c,
                                                                                  max_size=3), max_leaves=10)
events = st.one_of(
    st.tuples(st.sampled_from(("a/x", "b/y/z", "c", "a/+", "", "x" * 300)),
              st.dictionaries(st.sampled_from(("load", "name", "")), scalars, max_size=2),
              st.binary(max_size=40)).map(list),
    values)

# idempotent publish (core/publish/dedup.py): events with a producer sequence, good and bad
keyed_events = st.builds(lambda ev, pseq: [*ev, pseq] if type(ev) is list and len(ev) == 3 else ev,
                         events, st.one_of(st.integers(0, 3), st.integers(0, 3), values))
producers = st.one_of(st.sampled_from(("p", "q", "", "x" * 300)), values)

subscribe = st.builds(
    lambda sub, pattern, flt, start, end, order: frame(msgpack.packb(
        [ClientType.SUBSCRIBE, sub, pattern, flt, start, end, *order])),
    st.integers(0, 4), st.sampled_from(PATTERNS), st.sampled_from(FILTERS), st.sampled_from(STARTS),
    st.sampled_from((None, 0, 10**12, "x")), st.sampled_from(ORDERS))
good_subscribe = st.builds(
    lambda sub, pattern, flt, start, order: frame(msgpack.packb(
        [ClientType.SUBSCRIBE, sub, pattern, flt, start, None, order])),
    st.integers(0, 4), st.sampled_from(("a/#", "b/#", "c/#", "d/x", "a/+/y", "#")),
    st.sampled_from((None, "load > 2")), st.sampled_from((["now"], ["start"], ["after", 1])),
    st.sampled_from(("publisher", "total")))
# bulk reads (READ): good ones, and any field of the wrong type or range, or a field too many
read = st.builds(
    lambda sub, pattern, flt, after, end, extra: frame(msgpack.packb(
        [ClientType.READ, sub, pattern, flt, after, end, *extra])),
    st.integers(0, 4), st.sampled_from(PATTERNS), st.sampled_from(FILTERS),
    st.sampled_from((0, 1, -5, "x", None, 10**12)), st.sampled_from((None, 0, 10**12, "x", 2**64 - 1, -1)),
    st.sampled_from(((), (), (1,))))
good_read = st.builds(
    lambda sub, pattern, flt, after: messages.read(messages.Read(sub, pattern, flt, after, 10**18)),
    st.integers(0, 4), st.sampled_from(("a/#", "a/x", "#", "+/y/z")), st.sampled_from((None, "load > 2")),
    st.sampled_from((0, 1, 10**12)))
client_frames = st.one_of(
    good_subscribe,
    good_subscribe,
    subscribe,
    good_read,
    read,
    st.integers(0, 5).map(messages.unsubscribe),
    st.builds(lambda seq, evs: frame(msgpack.packb([ClientType.PUBLISH, seq, evs])),
              st.integers(-1, 3), st.lists(events, max_size=4)),
    st.builds(lambda seq, evs, producer: frame(msgpack.packb([ClientType.PUBLISH, seq, evs, producer])),
              st.integers(-1, 3), st.lists(keyed_events, max_size=4), producers),
    st.integers(0, 3).map(messages.status_request),
    st.just(messages.hello("svc", "i")),
    st.builds(lambda kind, rest: frame(msgpack.packb([kind, *rest])), st.integers(0, 40),
              st.lists(values, max_size=5)),
    st.binary(max_size=30))

actions = st.one_of(
    st.tuples(st.just("accept"), st.sampled_from(CONNS)),
    st.tuples(st.just("send"), st.sampled_from(CONNS), good_subscribe),
    st.tuples(st.just("send"), st.sampled_from(CONNS), good_subscribe),
    st.tuples(st.just("send"), st.sampled_from(CONNS), client_frames),
    st.tuples(st.just("send"), st.sampled_from(CONNS), client_frames),
    st.tuples(st.just("block"), st.sampled_from(CONNS), st.booleans()),
    # a partial frame (held against the budget, under its progress deadline), then maybe more of it
    st.tuples(st.just("send"), st.sampled_from((*CONNS, PEER_CONN)),
              st.builds(lambda n, k: struct.pack(">I", n) + b"x" * k, st.integers(0, 4096), st.integers(0, 1500))),
    st.tuples(st.just("send"), st.sampled_from((*CONNS, PEER_CONN)), st.binary(min_size=1, max_size=1500)),
    st.tuples(st.just("lost"), st.sampled_from((*CONNS, PEER_CONN))),
    st.tuples(st.just("peer"), st.lists(st.tuples(st.integers(60, 160), st.lists(values, max_size=5)),
                                        max_size=3)),
    st.tuples(st.just("timer"), st.integers(1, 5 * 10**9)),
    st.tuples(st.just("sync")),
    st.tuples(st.just("reads")))


def check_bookkeeping(h: Harness) -> None:
    b = h.broker
    subs = {s.key for c in b.connections.values() for s in c.subs.values()}
    assert subs == set(b.local.subends)
    open_ = {key for key, s in b.local.subends.items() if s.end is None}
    assert open_ == set(b.local.memberships.tree_of)
    counts: dict[str, int] = {}
    for tree in b.local.memberships.tree_of.values():
        counts[tree] = counts.get(tree, 0) + 1
    assert counts == b.local.memberships.members
    assert len(counts) <= 2  # trees_max: a subscribe past it was refused and left nothing
    partials = b.reading.partials
    assert partials.held_bytes == sum(partials.held.values()) <= partials.bytes_max
    b.status()


def apply(h: Harness, action: tuple[Any, ...]) -> None:
    kind = action[0]
    if kind == "accept":
        if action[1] not in h.broker.connections:
            h.feed(Accepted(h.now, action[1]))
            h.sent.pop(action[1], None)
            h.closed.discard(action[1])
    elif kind == "send":
        h.send(action[1], action[2])
    elif kind == "block":
        h.block(action[1], action[2])
    elif kind == "lost":
        h.lost(action[1])
    elif kind == "peer":
        if PEER_CONN not in h.broker.connections and not h.broker.cluster.owns(PEER_CONN):
            h.feed(Accepted(h.now, PEER_CONN))
            h.send(PEER_CONN, peer.hello(NodeRef(1 << 100, "127.0.0.1:9")))
        for msg_type, body in action[1]:
            h.send(PEER_CONN, frame(msgpack.packb([msg_type, *body])))
    elif kind == "timer":
        h.timer(h.now + action[1])
    elif kind == "sync":
        h.sync()
    else:
        h.serve_reads()


@settings(max_examples=300, deadline=None)
@given(schedule=st.lists(actions, min_size=1, max_size=30))
def test_no_client_or_peer_input_raises_out_of_handle(schedule):
    # small memory bounds (docs/security.md), so that schedules reach each of them
    h = Harness(BrokerConfig(trees_max=2, subscriptions_per_connection_max=3, hello_frame_bytes_max=512,
                             partial_frames_bytes_max=3000, frame_progress_timeout_ns=2 * 10**9,
                             handshake_timeout_ns=10**9, send_queue_overflow_bytes_max=8192))
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    for conn in CONNS[:2]:
        h.connect(conn)
    for action in schedule:
        apply(h, action)
        check_bookkeeping(h)
