"""The pubend directory (core/broker/directory.py) in the byte-level simulator: real Broker cores on
simulated disks and TCP, leaf sets of 4 so that entries travel several hops; every broker lists
every pubend, a crashed broker's pubend stays listed with its last known log, and the crashed
broker comes back with its directory from its disk."""

from __future__ import annotations

import pytest

from tests.sim.test_cluster import Cluster
from tidings.core.units import SECOND_NS
from tidings.sim.clients import Publisher

BROKERS = 8


def listed(cluster: Cluster, i: int) -> dict[str, dict[str, object]]:
    return {e["pubend"]: e for e in cluster.status(i)["directory"]}


@pytest.mark.parametrize("seed", range(3))
def test_every_broker_lists_every_pubend_also_while_its_broker_is_down(seed: int) -> None:
    cluster = Cluster(seed, BROKERS)
    victim = 5
    publisher = Publisher(cluster.world, cluster.net, cluster.nodes[victim].address, "pub", 20,
                          bad_event_probability=0)
    publisher.start(cluster.world.now)
    cluster.run(3 * SECOND_NS)
    assert publisher.finished and len(publisher.acked) == 20
    everyone = {f"p{i}" for i in range(BROKERS)}
    assert all(set(listed(cluster, i)) == everyone for i in range(BROKERS))
    last = cluster.nodes[victim].disk.state().last_tick
    assert last > 0 and all(listed(cluster, i)[f"p{victim}"]["last_event_tick"] == last for i in range(BROKERS))

    cluster.nodes[victim].crash()
    cluster.run(20 * SECOND_NS)  # far past the failure timeout: every leaf set dropped it
    for i in range(BROKERS):
        if i == victim:
            continue
        leaves = {leaf[1] for leaf in cluster.status(i)["overlay"]["leaf_set"]}
        entry = listed(cluster, i)[f"p{victim}"]
        assert cluster.nodes[victim].address not in leaves
        assert (entry["address"], entry["last_event_tick"], entry["records"]) == (
            cluster.nodes[victim].address, last, 20)

    cluster.nodes[victim].restart()
    assert set(listed(cluster, victim)) == everyone  # from its disk, before it hears anyone
    cluster.run(3 * SECOND_NS)
    assert all(set(listed(cluster, i)) == everyone for i in range(BROKERS))
