"""The composer of Pastry and Scribe under untrusted peer messages.

Whatever a peer sends, `ClusterMember.received` either handles it or raises a TidingsError (which
the broker answers with an error and a closed link); it never raises anything else, and the node
goes on routing correctly afterwards.
"""

from __future__ import annotations

import contextlib
import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.broker.cluster import ClusterMember, Reliability
from tidings.core.config import BrokerConfig
from tidings.core.errors import TidingsError
from tidings.core.inputs import LogState
from tidings.core.multicast.agent import ScribeConfig
from tidings.core.multicast.messages import TreeActive, TreeEmpty
from tidings.core.multicast.trees import publish_trees
from tidings.core.overlay.envelope import Deliver
from tidings.core.overlay.node import OverlayConfig
from tidings.core.overlay.node_id import NodeRef, id_to_wire
from tidings.core.reliability.effects import PublishRouted
from tidings.core.reliability.messages import KnowledgeMessage
from tidings.core.reliability.node import DeliverRecords, ReliabilityNode

from .core_harness import as_batches

ME = NodeRef(7 << 120, "127.0.0.1:7400")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.text(max_size=8),
                    st.binary(max_size=20), st.just(id_to_wire(5)), st.just(ME.to_wire()))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=5), max_leaves=16)
raw = st.tuples(st.integers(60, 110), st.lists(values, max_size=6)).map(lambda t: [t[0], *t[1]])
# well-formed ROUTE envelopes whose payload is junk for Scribe: the path into its upcalls
routes = st.tuples(st.integers(0, 2**128 - 1), st.integers(0, 50), raw).map(
    lambda t: [64, id_to_wire(t[0]), [id_to_wire(9), "127.0.0.1:9"], t[1], t[2]])
messages = st.one_of(raw, routes)


def member() -> ClusterMember:
    m = ClusterMember(ME, OverlayConfig(), ScribeConfig(), random.Random(1))
    m.start(0, None)
    return m


# examples per fuzz: 150 in make test (1.5 s and 1.1 s of CPU; 5 s at 400, 3 s at 300), 3,000 in make soak
EXAMPLES = 150
SOAK_EXAMPLES = 3000
peer_batches = given(batch=st.lists(messages, min_size=1, max_size=8))


@settings(max_examples=EXAMPLES, deadline=None)
@peer_batches
def test_peer_garbage_raises_only_tidings_errors_and_routing_goes_on(batch):
    peer_garbage_goes_on(batch)


@pytest.mark.soak
@settings(max_examples=SOAK_EXAMPLES, deadline=None)
@peer_batches
def test_peer_garbage_raises_only_tidings_errors_and_routing_goes_on_for_long(batch):
    peer_garbage_goes_on(batch)


def peer_garbage_goes_on(batch):
    m = member()
    for message in batch:
        with contextlib.suppress(TidingsError):
            m.received(1, "127.0.0.1:9", message)
    decision = m.overlay.route_step(2, m.overlay.route(123, [96]))
    assert isinstance(decision, Deliver)  # alone in its overlay: every key is its own


# the guaranteed-delivery path: ACK and NACK shapes, and Scribe EVENTs carrying junk "knowledge"
TREE = "nodes/#"
knowledge_junk = st.tuples(st.sampled_from([160, 161, 162, 164, 7]), st.lists(values, max_size=8)).map(
    lambda t: [t[0], *t[1]])
knowledge_shaped = st.tuples(st.integers(-3, 2**64), st.integers(-3, 2**64), st.lists(st.integers(-3, 60), max_size=4),
                             st.lists(st.binary(max_size=12), max_size=4), st.booleans(),
                             st.one_of(st.none(), st.integers(-1, 5))).map(
    lambda t: [160, TREE, "p-x", t[0], t[1], t[2], t[3], t[4], t[5], t[4] and not t[2]])
# filter summaries: well-formed and not, from a child (widening, narrowing, stale) or a stranger
summary_entries = st.lists(st.tuples(st.sampled_from(["nodes/#", "nodes/+/x", "a+", "", 5]),
                                     st.sampled_from(["", "x > 1", "x =", None])).map(list), max_size=3)
summary_shaped = st.tuples(st.one_of(st.integers(-1, 8), values), st.one_of(st.none(), summary_entries, values),
                           st.one_of(st.integers(-1, 2**64), values)).map(lambda t: [164, TREE, t[0], t[1], t[2]])
tree_events = st.tuples(st.one_of(st.text(max_size=4), st.just(PARENT := "127.0.0.1:9")),
                        st.one_of(knowledge_junk, knowledge_shaped, values)).map(lambda t: [100, TREE, [t[0], t[1]]])
gd_messages = st.one_of(raw, knowledge_junk, tree_events, summary_shaped,
                        st.lists(values, max_size=3).map(lambda v: [161, v]),
                        st.tuples(values, values, values).map(lambda t: [162, *t]))


def member_with_delivery() -> tuple[ClusterMember, ReliabilityNode]:
    config = BrokerConfig()
    m = ClusterMember(ME, OverlayConfig(), ScribeConfig(), random.Random(1),
                      Reliability("p-me", config.reliability_config(), publish_trees, lambda: (0, LogState())))
    m.start(0, None)
    gd = m.reliability
    assert gd is not None
    m.settle(0, gd.local_subscribe(0, 1, TREE, 0))
    m.subscribe(0, TREE)
    return m, gd


gd_batches = given(batch=st.lists(gd_messages, min_size=1, max_size=8))


@settings(max_examples=EXAMPLES, deadline=None)
@gd_batches
def test_guaranteed_delivery_garbage_from_peers_raises_only_tidings_errors_and_streams_go_on(batch):
    gd_garbage_goes_on(batch)


@pytest.mark.soak
@settings(max_examples=SOAK_EXAMPLES, deadline=None)
@gd_batches
def test_guaranteed_delivery_garbage_from_peers_raises_only_tidings_errors_and_streams_go_on_for_long(batch):
    gd_garbage_goes_on(batch)


def gd_garbage_goes_on(batch):
    m, gd = member_with_delivery()
    for message in batch:
        with contextlib.suppress(TidingsError):
            m.received(1, PARENT, message)
        if message[0] == 100 and len(message) == 3:  # as Scribe hands an EVENT from this broker's parent to the streams
            with contextlib.suppress(TidingsError):
                m.settle(1, gd.event_arrived(1, TREE, message[2], PARENT))
    record = msgpack.packb(["p-good", 5, "nodes/a", {}, "s", "i", b"x"])
    good = KnowledgeMessage(TREE, "p-good", 0, 10, (5,), (record,), False).to_wire()
    out = m.settle(2, gd.event_arrived(2, TREE, [PARENT, good], PARENT))
    assert [e.records for e in out if isinstance(e, DeliverRecords)] == [[record]]


def test_the_pubend_reads_its_nodes_memory_of_tree_empty_with_its_lapse_and_tree_active():
    """The source asks no question of the agent: it reads the node's own memory of TREE_EMPTY
    (ScribeAgent.said_empty), so what it publishes on follows TREE_EMPTY, its lapse after
    `empty_hold_ns`, and TREE_ACTIVE, as the agent sees them."""
    config = BrokerConfig()
    m = ClusterMember(ME, OverlayConfig(), ScribeConfig(empty_hold_ns=1000), random.Random(1),
                      Reliability("p-me", config.reliability_config(), publish_trees, lambda: (0, LogState())))
    m.start(0, None)
    gd = m.reliability
    assert gd is not None
    root = "127.0.0.1:7500"

    def trees(now: int, tick: int) -> list[str]:
        record = msgpack.packb(["p-me", tick, "nodes/a", {}, "s", "i", b"x"])
        out = gd.published(now, as_batches([(tick, "nodes/a", {}, record)]), tick)
        return [e.tree for e in out if isinstance(e, PublishRouted)]

    everyone = ["nodes/a", "nodes/a/#", "nodes/#", "#"]
    m.received(0, root, TreeEmpty("nodes/a").to_wire())
    assert m.scribe.said_empty.suppressed(1, "nodes/a")
    assert trees(1, 5) == everyone[1:], "said empty, never known to have members: sent nothing"
    assert trees(1000, 6) == everyone, "the memory lapsed at empty_hold_ns"
    m.received(1001, root, TreeEmpty("nodes/a").to_wire())
    assert trees(1002, 7) == everyone[1:]
    m.received(1003, root, TreeActive("nodes/a").to_wire())
    assert trees(1004, 8) == everyone
