from tidings.core.multicast import messages as m
from tidings.core.multicast.agent import ScribeAgent
from tidings.core.multicast.empty_trees import EmptyTreeMemory, Suppressions
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.envelope import Deliver, PeerSend, RouteMessage
from tidings.core.overlay.node_id import NodeRef

from .scribe_harness import SECOND, node


def test_memory_releases_each_publisher_once_and_forgets_the_oldest_first():
    memory = EmptyTreeMemory(3)
    for tree, publisher in [("x", "p1"), ("x", "p2"), ("x", "p1"), ("y", "p3"), ("y", "p4")]:
        memory.remember(tree, publisher)
    assert len(memory) == 3 and memory.trees() == ["x", "y"]
    assert memory.release("x") == ["p2"]
    assert memory.release("x") == []
    assert memory.release("y") == ["p3", "p4"] and len(memory) == 0


def test_suppressions_end_by_time_by_tree_active_or_when_the_root_dies():
    held = Suppressions(trees_max=2, hold_ns=10)
    held.suppress(0, "x", "r1")
    held.suppress(0, "y", "r2")
    assert held.suppressed(9, "x") and not held.suppressed(10, "x")
    held.lift("y")
    assert not held.suppressed(1, "y")
    held.suppress(0, "a", "r1")
    held.suppress(0, "b", "r1")
    held.suppress(0, "c", "r2")
    assert not held.suppressed(1, "a"), "bounded: the oldest went"
    held.lift_root("r1")
    assert not held.suppressed(1, "b") and held.suppressed(1, "c")


def test_a_publisher_publishes_again_when_the_root_that_said_empty_fails():
    root, publisher = node("root"), ScribeAgent(node("pub"))
    publisher.handle(0, root.address, m.TreeEmpty("t").to_wire())
    assert publisher.publish(1, "t", ["e"]) == []
    publisher.node_failed(2, root)
    assert publisher.publish(3, "t", ["e"]) != []


def test_a_root_whose_key_moves_away_releases_its_empty_tree_publishers():
    key = tree_key("t")
    root = ScribeAgent(NodeRef(key + 10, "root:7000"))
    pub = node("pub")
    effects = root.on_deliver(0, Deliver(RouteMessage(key, pub, 2, m.ScribePublish("t", ["e"]).to_wire())))
    assert effects == [PeerSend(pub.address, m.TreeEmpty("t").to_wire())]
    assert root.leaf_set_changed(SECOND, [NodeRef(key + 20, "far:7000")]) == []
    moved = root.leaf_set_changed(SECOND, [NodeRef(key + 1, "closer:7000")])
    assert moved == [PeerSend(pub.address, m.TreeActive("t").to_wire())]
