"""The Scribe experiment at a few hundred brokers: every member gets each group's event once, the
delay penalties are at least 1 (IP multicast's shortest paths are the floor), the stresses count
what was sent, and one seed is one run."""

from __future__ import annotations

import pytest

pytest.importorskip("numpy")
pytest.importorskip("scipy")

from tidings.core.units import SECOND_NS
from tidings.sim.overlay.scribe_experiment import ScribeExperiment, group_sizes
from tidings.sim.overlay.transit_stub import TransitStubShape

SMALL = TransitStubShape(transit_domains=4, transit_routers=3, stubs_per_transit=3, stub_routers=6)


def run(seed: int = 1, nodes: int = 300, groups: int = 40, children_max: int | None = None):
    experiment = ScribeExperiment(nodes, groups, seed, children_max=children_max, shape=SMALL,
                                  subscribe_window_ns=2 * SECOND_NS, settle_ns=3 * SECOND_NS)
    return experiment.run()


@pytest.fixture(scope="module")
def result():
    return run()


def test_group_sizes_follow_the_papers_zipf_law() -> None:
    sizes = group_sizes(100_000, 1500)
    assert sizes[0] == 100_000 and sizes[1] == 42_045 and sizes[-1] == 11
    assert sizes == sorted(sizes, reverse=True)
    assert 390_000 < sum(sizes) < 400_000  # about 3.95 subscriptions per node


def test_every_member_gets_its_groups_event_exactly_once(result) -> None:
    summary, dist = result
    assert summary["members_missed"] == 0 and summary["duplicates"] == 0
    assert summary["subscriptions"] == sum(dist["group_sizes"])


def test_delay_penalties_are_never_below_ip_multicasts(result) -> None:
    _, dist = result
    assert dist["rad"] and len(dist["rad"]) == len(dist["rmd"])
    assert min(dist["rad"]) >= 1.0 and min(dist["rmd"]) >= 1.0
    assert max(dist["rad"]) > 1.0  # overlay hops do cost something


def test_node_stress_counts_the_tree_edges_each_event_crossed(result) -> None:
    summary, dist = result
    # one EVENT per child per group: children entries over all nodes are the EVENT messages sent
    assert sum(dist["node_children"]) == summary["event_messages"]
    assert sum(1 for t in dist["node_tables"] if t) <= summary["nodes"]
    assert all(c >= t for t, c in zip(dist["node_tables"], dist["node_children"], strict=True))


def test_link_stress_counts_each_copy_on_each_link_of_its_route(result) -> None:
    summary, dist = result
    scribe, ip = summary["link_stress_scribe"], summary["link_stress_ip"]
    assert scribe["copies"] == sum(dist["link_stress_scribe"])
    # every copy leaves its sender's LAN and enters its receiver's: at least two links each
    assert scribe["copies"] >= 2 * summary["event_messages"]
    # IP multicast sends each link of a tree one copy; no link carries more than one per group
    assert ip["max"] <= summary["groups"]
    assert ip["copies"] < scribe["copies"]


def test_a_bounded_children_table_stays_within_its_bound(result) -> None:
    assert result[0]["largest_children_table"] > 4
    summary, _ = run(children_max=4)
    assert summary["largest_children_table"] <= 4
    assert summary["duplicates"] == 0


def test_the_same_seed_gives_the_same_run_and_another_seed_another(result) -> None:
    again, _ = run()
    assert again == result[0]
    other, _ = run(seed=2)
    assert other["trace_digest"] != again["trace_digest"]
