"""Two brokers restarted at the same time, each told to join through the other: before, each
dialled the other and waited for an answer neither could give (neither was in an overlay) until its
join timeout stopped it; now the one with the smaller nodeId founds the overlay and the other joins
it (core/overlay/node.py)."""

import time

import pytest

from tidings.testing import LOCAL_LIVENESS, Cluster

pytestmark = pytest.mark.integration

JOINED_WITHIN_S = 20.0  # well under the join timeout (60 s), which is how long they used to wait


def test_two_brokers_restarted_together_through_each_other_join_at_once(tmp_path):
    with Cluster(tmp_path / "cluster", 2, LOCAL_LIVENESS) as cluster:
        a, b = cluster[0], cluster[1]
        assert a.stop() == 0 and b.stop() == 0
        a.join, b.join = b.address, a.address
        began = time.monotonic()
        a.spawn()
        b.spawn()
        a.wait_ready()
        b.wait_ready()
        cluster.wait_joined(JOINED_WITHIN_S)
        assert time.monotonic() - began < JOINED_WITHIN_S
        assert a.running and b.running
