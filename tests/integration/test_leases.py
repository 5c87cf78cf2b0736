"""Leases with real brokers: a client that vanished without closing loses its subscriptions on every
broker of the cluster; the library's client keeps its own by renewing."""

import socket
import time

import pytest

from tidings import sync
from tidings.core.session.client_session import ClientSession
from tidings.testing import LOCAL_LIVENESS, Cluster

pytestmark = pytest.mark.integration

LEASE_NS = 1_000_000_000
PATTERN = "leases/#"


def memberships(cluster, tree="leases/#"):
    """(broker address, is member, children) of `tree` at every running broker."""
    out = []
    for address, status in cluster.statuses().items():
        for t in (status or {}).get("trees", []):
            if t["name"] == tree:
                out.append((address, t["member"], t["children"]))
    return out


def test_a_vanished_subscriber_is_removed_everywhere_and_a_renewing_one_stays(tmp_path):
    with Cluster(tmp_path, 2, {**LOCAL_LIVENESS, "lease_ns": LEASE_NS}) as cluster:
        b0, b1 = cluster[0], cluster[1]
        # the vanished client: HELLO and SUBSCRIBE over a raw socket, then silence (a frozen host)
        session = ClientSession("ghost", "frozen")
        host, port = b1.address.split(":")
        ghost = socket.create_connection((host, int(port)), timeout=10)
        ghost.sendall(session.hello() + session.subscribe(PATTERN)[1])
        with sync.connect(b0.address, service="live") as live, sync.connect(b1.address) as pub:
            sub = live.subscribe(PATTERN)
            started = time.monotonic()
            cluster.wait(lambda: any(member and address == b1.address for address, member, _ in memberships(cluster)),
                         what="the ghost's broker joined the tree")
            status = cluster.wait(lambda: (s := b1.status())["leases_expired"] == 1 and s, timeout=20,
                                  what="the ghost's lease expired")
            assert status["subscriptions"] == 0 and time.monotonic() - started >= LEASE_NS / 1e9 * 0.9

            def pruned():  # b1 left the tree: nobody has it as a child, it is no member
                rows = memberships(cluster)
                return rows and all(not (a == b1.address and m) and b1.address not in c for a, m, c in rows)
            cluster.wait(pruned, what="the tree pruned the ghost's broker")
            # three leases later the renewing subscriber is still there and still receives
            deadline = time.monotonic() + 3 * LEASE_NS / 1e9
            n = 0
            while time.monotonic() < deadline:
                n += 1
                pub.publish("leases/x", str(n))
                assert sub.get(timeout=10).payload == str(n).encode()
            assert b0.status()["leases_expired"] == 0 and b0.status()["leases_held"] == 1
        ghost.close()
