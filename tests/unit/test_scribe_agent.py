"""One ScribeAgent at a time: its rules, its limits, and its answers to untrusted peers."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.auth.rules import Rule
from tidings.core.errors import BAD_MESSAGE, ProtocolError, TidingsError
from tidings.core.multicast import messages as m
from tidings.core.multicast.agent import ScribeAgent, ScribeConfig
from tidings.core.multicast.effects import ChildAdded, DeliverLocal, ParentSuspected, extend_repairs
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.envelope import Deliver, Forward, PeerSend, RouteMessage, RouteTo
from tidings.core.overlay.node_id import NodeRef, ring_distance
from tidings.core.wire.types import ScribeType

from .scribe_harness import SECOND, node

ME = node("me")
A, B, C = node("a"), node("b"), node("c")
TREE = "t/#"
KEY = tree_key(TREE)


def routed(message, source=A) -> RouteMessage:
    return RouteMessage(KEY, source, 1, message.to_wire())


def forward(agent, message, now=0, source=A):
    return agent.on_forward(now, Forward(routed(message, source), ME))


def deliver(agent, message, now=0, source=A):
    return agent.on_deliver(now, Deliver(routed(message, source)))


def sends(effects, kind=None):
    return [(e.address, m.decode(e.message)) for e in effects
            if type(e) is PeerSend and (kind is None or e.message[0] == kind)]


def joined_child(parent=B) -> ScribeAgent:
    """An agent that is a member of TREE with `parent` as its parent."""
    agent = ScribeAgent(ME)
    agent.subscribe(0, TREE)
    assert agent.handle(0, parent, m.Heartbeat((TREE,)).to_wire()) == []
    return agent


def test_subscribe_routes_a_subscribe_and_its_own_forward_passes_through():
    agent = ScribeAgent(ME)
    (route,) = agent.subscribe(0, TREE, extra=[7])
    assert route == RouteTo(KEY, m.ScribeSubscribe(TREE, ME, [7]).to_wire())
    effects, onward = agent.on_forward(0, Forward(RouteMessage(KEY, ME, 0, route.payload), A))
    assert effects == [] and onward is not None


def test_forward_adopts_the_child_and_joins_when_not_yet_in_the_tree():
    agent = ScribeAgent(ME)
    effects, onward = forward(agent, m.ScribeSubscribe(TREE, A, "x"))
    assert onward is None
    assert effects == [
        PeerSend(A.address, m.Heartbeat((TREE,)).to_wire()),
        ChildAdded(TREE, A, "x"),
        RouteTo(KEY, m.ScribeSubscribe(TREE, ME, "x").to_wire()),  # a new forwarder passes its child's extra on
    ]
    effects, onward = forward(agent, m.ScribeSubscribe(TREE, C))
    assert onward is None and not [e for e in effects if type(e) is RouteTo]
    assert agent.status()[0]["children"] == [A.address, C.address]


def test_forward_lets_publish_create_and_the_parents_own_subscribe_pass():
    agent = joined_child(parent=B)
    for message in (m.ScribePublish(TREE, ["e"]), m.Create(TREE, m.TreeMetadata("x")), m.ScribeSubscribe(TREE, B)):
        effects, onward = forward(agent, message)
        assert effects == [] and onward is not None


def test_event_goes_to_children_and_local_members_only_from_the_parent():
    agent = joined_child(parent=B)
    forward(agent, m.ScribeSubscribe(TREE, A))
    effects = agent.handle(1, B, m.TreeEvent(TREE, ["e"]).to_wire())
    assert DeliverLocal(TREE, ["e"]) in effects
    assert sends(effects) == [(A.address, m.TreeEvent(TREE, ["e"]))]
    stranger = agent.handle(2, C, m.TreeEvent(TREE, ["e"]).to_wire())
    assert stranger == [PeerSend(C.address, m.ScribeUnsubscribe(TREE).to_wire())]
    assert agent.handle(2, C, m.Heartbeat((TREE, "other")).to_wire()) == [
        PeerSend(C.address, m.ScribeUnsubscribe(TREE).to_wire()),
        PeerSend(C.address, m.ScribeUnsubscribe("other").to_wire()),
    ]


def test_heartbeats_are_skipped_for_children_that_just_got_an_event():
    agent = joined_child(parent=B)
    forward(agent, m.ScribeSubscribe(TREE, A))
    forward(agent, m.ScribeSubscribe(TREE, C))
    assert agent.next_deadline() == SECOND
    agent.handle(SECOND // 2, B, m.TreeEvent(TREE, ["e"]).to_wire())
    assert sends(agent.handle_timeout(SECOND), ScribeType.HEARTBEAT) == []
    beats = sends(agent.handle_timeout(2 * SECOND), ScribeType.HEARTBEAT)
    assert beats == [(A.address, m.Heartbeat((TREE,))), (C.address, m.Heartbeat((TREE,)))]


def test_refresh_goes_to_the_parent_and_keeps_the_child():
    config = ScribeConfig()
    agent = joined_child(parent=B)
    forward(agent, m.ScribeSubscribe(TREE, A))
    now = 0
    for _ in range(40):
        now += SECOND
        agent.handle(now, B, m.Heartbeat((TREE,)).to_wire())
        if now % config.refresh_interval_ns == 0:
            agent.handle(now, A, m.Refresh((TREE,)).to_wire())
        effects = agent.handle_timeout(now)
        if now == config.refresh_interval_ns:
            assert (B.address, m.Refresh((TREE,))) in sends(effects)
    assert agent.status()[0]["children"] == [A.address]


def test_a_silent_parent_is_suspected_and_the_repair_can_carry_extra():
    agent = joined_child(parent=B)
    assert agent.handle_timeout(2 * SECOND) == []
    effects = agent.handle_timeout(3 * SECOND)
    suspected, route = [e for e in effects if type(e) in (ParentSuspected, RouteTo)]
    assert suspected == ParentSuspected(TREE, m.ScribeSubscribe(TREE, ME))
    assert route == RouteTo(KEY, suspected.subscribe.to_wire())
    (_, extended) = extend_repairs([suspected, route], lambda upcall: {"since": 9})
    assert m.decode(extended.payload) == m.ScribeSubscribe(TREE, ME, {"since": 9})


def test_extend_repairs_touches_only_the_route_right_after_the_upcall():
    other = RouteTo(KEY, m.ScribeSubscribe(TREE, A).to_wire())
    suspected = ParentSuspected(TREE, m.ScribeSubscribe(TREE, ME))
    effects = [other, suspected, RouteTo(KEY, suspected.subscribe.to_wire()), other]
    out = extend_repairs(effects, lambda upcall: 5)
    assert out[0] == other and out[1] == suspected and out[3] == other
    assert m.decode(out[2].payload) == m.ScribeSubscribe(TREE, ME, 5)


def test_unsubscribing_before_the_parent_is_known_prunes_the_late_parent():
    agent = ScribeAgent(ME)
    agent.subscribe(0, TREE)
    assert agent.unsubscribe(0, TREE) == []
    assert agent.status() == []
    late = agent.handle(1, B, m.Heartbeat((TREE,)).to_wire())
    assert late == [PeerSend(B.address, m.ScribeUnsubscribe(TREE).to_wire())]


def test_node_failed_repairs_a_parent_at_once_and_drops_a_child():
    agent = joined_child(parent=B)
    forward(agent, m.ScribeSubscribe(TREE, A))
    assert [type(e) for e in agent.node_failed(0, A)] == []
    assert agent.status()[0]["children"] == []
    assert [type(e) for e in agent.node_failed(0, B)] == [ParentSuspected, RouteTo]
    assert agent.status()[0]["parent"] is None


def test_unsubscribe_waits_for_the_children_then_tells_the_parent():
    agent = joined_child(parent=B)
    forward(agent, m.ScribeSubscribe(TREE, A))
    assert agent.unsubscribe(0, TREE) == []
    assert agent.status()[0]["role"] == "forwarder"
    leave = m.ScribeUnsubscribe(TREE).to_wire()
    assert agent.handle(0, A, leave) == [PeerSend(B.address, leave)]
    assert agent.status() == []
    assert agent.handle_timeout(SECOND) == [] and agent.next_deadline() is None


def test_the_root_keeps_and_replicates_metadata_to_the_k_nearest():
    root = NodeRef(KEY, "root:7000")
    agent = ScribeAgent(root, ScribeConfig(replicas=2))
    agent.leaf_set_changed(0, [A, B, C])
    metadata = m.TreeMetadata("alice", (Rule("alice", "subscribe", True, "t/#"),), "a:7000")
    effects = deliver(agent, m.Create(TREE, metadata))
    nearest = sorted([A, B, C], key=lambda n: ring_distance(KEY, n.node_id))[:2]
    assert sends(effects) == [(n.address, m.Replica(TREE, metadata)) for n in nearest]
    assert agent.leaf_set_changed(1, [C, B, A]) == [], "already replicated there"
    assert agent.status()[0]["creator"] == "alice" and agent.status()[0]["role"] == "root"


def test_a_node_becoming_root_takes_the_metadata_from_its_replica():
    agent = ScribeAgent(ME)
    agent.handle(0, A, m.Replica(TREE, m.TreeMetadata("alice")).to_wire())
    deliver(agent, m.ScribeSubscribe(TREE, B))
    (entry,) = agent.status()
    assert entry["role"] == "root" and entry["creator"] == "alice" and entry["children"] == [B.address]


def test_a_forwarder_that_becomes_root_leaves_its_old_parent():
    agent = joined_child(parent=B)
    effects = deliver(agent, m.ScribeSubscribe(TREE, C))
    assert sends(effects, ScribeType.UNSUBSCRIBE) == [(B.address, m.ScribeUnsubscribe(TREE))]
    assert agent.status()[0]["role"] == "root+member"


def test_publish_to_an_empty_root_answers_tree_empty_and_a_join_answers_tree_active():
    root = ScribeAgent(ME)
    assert deliver(root, m.ScribePublish(TREE, ["e"]), source=A) == [PeerSend(A.address, m.TreeEmpty(TREE).to_wire())]
    assert root.status() == []
    effects = deliver(root, m.ScribeSubscribe(TREE, B))
    assert (A.address, m.TreeActive(TREE)) in sends(effects)
    publisher = ScribeAgent(A)
    publisher.handle(0, ME, m.TreeEmpty(TREE).to_wire())
    assert publisher.publish(1, TREE, ["e"]) == []
    publisher.handle(2, ME, m.TreeActive(TREE).to_wire())
    assert publisher.publish(3, TREE, ["e"]) == [RouteTo(KEY, m.ScribePublish(TREE, ["e"]).to_wire())]


def test_limits_trees_children_and_remembered_publishers():
    config = ScribeConfig(trees_max=2, children_per_tree_max=1, publisher_memory_max=2, empty_trees_max=1)
    agent = ScribeAgent(ME, config)
    agent.subscribe(0, "x")
    agent.subscribe(0, "y")
    with pytest.raises(TidingsError) as info:
        agent.subscribe(0, "z")
    assert info.value.code == "too-many-trees"
    assert forward(agent, m.ScribeSubscribe("z", A))[1] is not None, "full: a node further on takes it"
    forward(agent, m.ScribeSubscribe("x", A))
    assert forward(agent, m.ScribeSubscribe("x", B))[1] is not None, "children table full"

    root = ScribeAgent(ME, config)
    for publisher in (A, B, C):
        deliver(root, m.ScribePublish(TREE, ["e"]), source=publisher)
    actives = sends(deliver(root, m.ScribeSubscribe(TREE, node("d"))), ScribeType.TREE_ACTIVE)
    assert [address for address, _ in actives] == [B.address, C.address]

    publisher = ScribeAgent(A, config)
    publisher.handle(0, ME, m.TreeEmpty("x").to_wire())
    publisher.handle(0, ME, m.TreeEmpty("y").to_wire())
    assert publisher.publish(1, "x", ["e"]) != [] and publisher.publish(1, "y", ["e"]) == []


def test_wrong_kinds_and_garbage_raise_protocol_error():
    agent = ScribeAgent(ME)
    bad = [
        lambda: agent.handle(0, A, m.ScribeSubscribe(TREE, A).to_wire()),
        lambda: agent.handle(0, A, [ScribeType.EVENT, TREE]),
        lambda: agent.handle(0, A, "garbage"),
        lambda: agent.on_forward(0, Forward(routed(m.TreeEvent(TREE, [])), B)),
        lambda: agent.on_deliver(0, Deliver(routed(m.Heartbeat((TREE,))))),
        lambda: agent.on_deliver(0, Deliver(RouteMessage(KEY, A, 0, [ScribeType.SUBSCRIBE, TREE, "x", None]))),
    ]
    for call in bad:
        with pytest.raises(ProtocolError) as info:
            call()
        assert info.value.code == BAD_MESSAGE


PEERS = st.sampled_from([A, B, C])
TREES = st.sampled_from([TREE, "u", "v"])
DIRECT = st.one_of(
    st.builds(m.ScribeUnsubscribe, TREES),
    st.builds(m.TreeEvent, TREES, st.just(["e"])),
    st.builds(m.Heartbeat, st.lists(TREES, min_size=1, max_size=3).map(tuple)),
    st.builds(m.Refresh, st.lists(TREES, min_size=1, max_size=3).map(tuple)),
    st.builds(m.Replica, TREES, st.just(m.TreeMetadata("z"))),
    st.builds(m.TreeEmpty, TREES),
    st.builds(m.TreeActive, TREES),
)
ROUTED = st.one_of(
    st.builds(m.ScribeSubscribe, TREES, PEERS, st.none()),
    st.builds(m.ScribePublish, TREES, st.just(["e"])),
    st.builds(m.Create, TREES, st.just(m.TreeMetadata("z"))),
)
STEP = st.one_of(
    st.tuples(st.just("direct"), PEERS, DIRECT),
    st.tuples(st.just("forward"), PEERS, ROUTED),
    st.tuples(st.just("deliver"), PEERS, ROUTED),
    st.tuples(st.just("local"), TREES, st.sampled_from(["subscribe", "unsubscribe", "publish"])),
    st.tuples(st.just("fail"), PEERS, st.none()),
    st.tuples(st.just("leaf"), st.lists(st.sampled_from([A, B, C, NodeRef(KEY, "k:7000")]), unique=True), st.none()),
    st.tuples(st.just("tick"), st.none(), st.none()),
)


@settings(max_examples=int(os.environ.get("SCRIBE_EXAMPLES", "300")))
@given(st.lists(STEP, max_size=40))
def test_any_sequence_of_well_formed_inputs_keeps_the_invariants(steps):
    agent = ScribeAgent(ME, ScribeConfig(children_per_tree_max=2))
    agent.leaf_set_changed(0, [A, B])
    now = 0
    for kind, who, what in steps:
        now += SECOND // 2
        if kind == "direct":
            agent.handle(now, who, what.to_wire())
        elif kind == "forward":
            agent.on_forward(now, Forward(routed(what, who), C))
        elif kind == "deliver":
            agent.on_deliver(now, Deliver(routed(what, who)))
        elif kind == "local":
            getattr(agent, what)(now, who, *(["e"] if what == "publish" else []))
        elif kind == "fail":
            agent.node_failed(now, who)
        elif kind == "leaf":
            agent.leaf_set_changed(now, who)
        else:
            agent.handle_timeout(now)
        for entry in agent.status():
            assert entry["member"] or entry["children"] or entry["creator"]
            assert entry["role"]
            assert not ("root" in entry["role"] and entry["parent"] is not None)
            assert len(entry["children"]) <= 2 and entry["parent"] not in entry["children"]
        assert agent.next_deadline() is not None or agent.status() == []
