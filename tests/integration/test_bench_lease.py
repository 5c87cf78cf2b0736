"""The benchmark's tidings load client keeps the broker's lease on its subscription while it only
reads (bench/tidings_client.py `renew_lease`, called from the loads' read loops): with a 600 ms lease,
a subscriber that reads nothing for 2 s still gets the events published after, and one that does
not renew is told `lease-expired` and gets none (the check can fail)."""

import select
import sys
import time
from pathlib import Path

import pytest

from tidings import sync
from tidings.testing import BrokerProcess

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import tidings_client  # noqa: E402

LEASE_NS = 600_000_000
IDLE_S = 2.0  # more than three leases
DEADLINE_S = 10.0


def read_for(conn: tidings_client.TidingsConnection, seconds: float, renew: bool) -> bytes:
    """What arrives on `conn` in `seconds` (renewing its lease meanwhile, or not)."""
    data, stop = conn.leftover(), time.monotonic() + seconds
    while (left := stop - time.monotonic()) > 0:
        if renew:
            conn.renew_lease()
        if select.select([conn.sock], [], [], min(left, 0.05))[0]:
            data += conn.sock.recv(1 << 16)
    return data


@pytest.mark.parametrize("renew", [True, False], ids=["renewing", "not renewing"])
def test_a_reader_that_renews_keeps_its_subscription(tmp_path: Path, renew: bool) -> None:
    with BrokerProcess(tmp_path / "b", config={"lease_ns": LEASE_NS}) as broker:
        sub = tidings_client.TidingsConnection(broker.port, "sub-0")
        try:
            assert sub.info["lease_ns"] == LEASE_NS
            sub.subscribe(1, "bench/lease")
            idle = read_for(sub, IDLE_S, renew)
            with sync.connect(broker.address, service="bench", instance="pub") as pub:
                pub.publish_many([("bench/lease", b"x", {}) for _ in range(5)])
            events = tidings_client.EventsCounter()
            got, stop = events.feed(idle)[0], time.monotonic() + (DEADLINE_S if renew else 1.0)
            while got < 5 and time.monotonic() < stop:  # (not renewing: a second in which none comes)
                got += events.feed(read_for(sub, 0.1, renew))[0]
        finally:
            sub.close()
    assert (got, b"lease-expired" in idle) == ((5, False) if renew else (0, True))
