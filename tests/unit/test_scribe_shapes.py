"""Scribe with the reliability layer (`forward_events` off): it tells the trees' shapes as values
(`shape_changes`) and leaves the SUBSCRIBE extra of its repairs and of a new forwarder to that
layer (a typed `Join`), instead of being asked or having its queued messages rewritten."""

from dataclasses import replace

from tidings.core.multicast import messages as m
from tidings.core.multicast.agent import ScribeAgent, ScribeConfig
from tidings.core.multicast.effects import ChildAdded, Join, JoinPurpose, ParentSuspected, TreeShape
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.envelope import Forward, RouteMessage, RouteTo

from .scribe_harness import node

ME = node("me")
A, B = node("a"), node("b")
TREE = "t/#"
KEY = tree_key(TREE)


def agent() -> ScribeAgent:
    return ScribeAgent(ME, replace(ScribeConfig(), forward_events=False))


def test_shapes_are_told_once_per_change_in_the_order_trees_changed() -> None:
    a = agent()
    a.subscribe(0, TREE, extra=[None, [], None])
    assert a.shape_changes() == [TreeShape(TREE, True, False, None, ())]
    assert a.shape_changes() == []  # told once
    a.handle(0, B, m.Heartbeat((TREE,)).to_wire())  # the parent is heard of
    a.on_forward(0, Forward(RouteMessage(KEY, A, 1, m.ScribeSubscribe(TREE, A).to_wire()), ME))  # a child
    assert a.shape_changes() == [TreeShape(TREE, True, False, B.address, (A.address,))]
    a.unsubscribe(0, TREE)
    a.node_failed(0, A)  # no member, no child: pruned
    assert a.shape_changes() == [TreeShape(TREE)]


def test_without_the_reliability_layer_no_shape_is_kept() -> None:
    a = ScribeAgent(ME)
    a.subscribe(0, TREE)
    assert a.shape_changes() == []


def test_a_new_forwarder_leaves_its_subscribes_extra_to_the_layer_above() -> None:
    a = agent()
    child_extra = [5, [["p", 9]], [1, None]]
    effects, onward = a.on_forward(
        0, Forward(RouteMessage(KEY, A, 1, m.ScribeSubscribe(TREE, A, child_extra).to_wire()), ME))
    assert onward is None
    assert [type(e) for e in effects if type(e) in (ChildAdded, Join, RouteTo)] == [ChildAdded, Join]
    (join,) = [e for e in effects if type(e) is Join]
    assert join == Join(KEY, m.ScribeSubscribe(TREE, ME, child_extra), JoinPurpose.FORWARDER)


def test_a_repair_is_a_join_of_its_own_right_after_the_suspicion() -> None:
    a = agent()
    a.subscribe(0, TREE)
    a.handle(0, B, m.Heartbeat((TREE,)).to_wire())
    effects = a.node_failed(0, B)
    own = m.ScribeSubscribe(TREE, ME)
    assert effects == [ParentSuspected(TREE, own), Join(KEY, own, JoinPurpose.OWN)]
    assert a.shape_changes()[-1] == TreeShape(TREE, True, False, None, ())
