"""Scribe trees over 500 simulated brokers running the broker's own composer (ClusterMember):
subscribers on many brokers form one tree, published events reach each of them once, and the tree
repairs itself after forwarders fail and after its rendez-vous point fails.

`tree_problems` (tidings.sim.overlay.scribe) says what is wrong with a tree, one line per problem.
"""

from __future__ import annotations

from tidings.core.multicast.agent import ScribeConfig
from tidings.core.overlay.node import OverlayConfig
from tidings.core.units import MILLISECOND_NS, SECOND_NS
from tidings.sim.overlay.build import install_steady
from tidings.sim.overlay.scribe import TreeWatch, cluster_members, tree_entries, tree_problems
from tidings.sim.overlay.sim import OverlaySim

OVERLAY = OverlayConfig()
SCRIBE = ScribeConfig()
TREE = "sensors/#"
# A child notices a dead parent within parent_timeout plus one tick; its repair SUBSCRIBE may meet
# another stale routing entry and be lost, and is sent again after the next timeout. Four rounds
# cover that with room to spare.
REPAIR_NS_MAX = 4 * (SCRIBE.parent_timeout_ns + SCRIBE.heartbeat_interval_ns)


def tree_with_subscribers(seed: int, brokers: int = 500, subscribers: int = 100):
    sim = OverlaySim(brokers, seed, cluster_members(OVERLAY, SCRIBE))
    install_steady(sim, OVERLAY, sim.world.derive_rng("build"))
    sim.run(2 * SECOND_NS)
    watch = TreeWatch(sim)
    members = sorted(sim.world.derive_rng("subscribers").sample(range(brokers), subscribers))
    watch.subscribe(members, TREE)
    sim.run(2 * SECOND_NS)
    assert tree_problems(sim, TREE, members) == []
    return sim, watch, members


def repair_time_ns(sim: OverlaySim, members: list[int]) -> int | None:
    """Virtual time until the tree is whole again (checked every 250 ms), None past the bound."""
    start = sim.world.now
    while tree_problems(sim, TREE, members):
        if sim.world.now - start > REPAIR_NS_MAX:
            return None
        sim.run(250 * MILLISECOND_NS)
    return sim.world.now - start


def publisher(sim: OverlaySim, members: list[int]) -> int:
    return next(h for h in sim.live() if h not in members)


def test_subscribers_on_many_brokers_form_one_tree_and_receive_each_event_once():
    sim, watch, members = tree_with_subscribers(seed=1)
    entries = tree_entries(sim, TREE)
    assert len(entries) >= len(members)  # members, plus the forwarders and the root
    for event_id in range(3):
        watch.publish(publisher(sim, members), TREE, event_id)
    sim.run(2 * SECOND_NS)
    for event_id in range(3):
        assert watch.missing(members, TREE, event_id) == []


def test_the_tree_is_repaired_after_forwarders_fail():
    sim, watch, members = tree_with_subscribers(seed=2)
    entries = tree_entries(sim, TREE)
    forwarders = [h for h, e in entries.items() if e["children"] and "root" not in e["role"] and h not in members]
    assert len(forwarders) >= 10
    for host in forwarders[:10]:
        sim.fail_silently(host)
    assert repair_time_ns(sim, members) is not None, tree_problems(sim, TREE, members)
    watch.publish(publisher(sim, members), TREE, 7)
    sim.run(2 * SECOND_NS)
    assert watch.missing(members, TREE, 7) == []


def test_a_failed_rendezvous_point_is_replaced_and_every_subscriber_receives_again():
    sim, watch, members = tree_with_subscribers(seed=3)
    (root,) = [h for h, e in tree_entries(sim, TREE).items() if "root" in e["role"]]
    sim.fail_silently(root)
    members = [h for h in members if h != root]
    assert repair_time_ns(sim, members) is not None, tree_problems(sim, TREE, members)
    (new_root,) = [h for h, e in tree_entries(sim, TREE).items() if "root" in e["role"]]
    assert new_root != root
    watch.publish(publisher(sim, members), TREE, 9)
    sim.run(2 * SECOND_NS)
    assert watch.missing(members, TREE, 9) == []


def test_the_same_seed_gives_the_same_tree_trace_and_another_seed_another():
    def digest(seed: int) -> str:
        sim, watch, members = tree_with_subscribers(seed)
        watch.publish(publisher(sim, members), TREE, 1)
        sim.run(2 * SECOND_NS)
        return sim.world.trace_digest()

    first = digest(31)
    assert digest(31) == first
    assert digest(32) != first
