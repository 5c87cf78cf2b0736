"""The persistent filtering subsystem with real brokers: a durable subscriber that comes back to its
own broker after an absence gets exactly what matched it meanwhile, and its broker asks the
publisher's broker only for those ticks (the PFS said which); resumed on a broker without its PFS
records it gets the same events by refiltering."""

import pytest

from tidings import sync
from tidings.testing import LOCAL_LIVENESS, Cluster, wait_for

pytestmark = pytest.mark.integration

AWAY_EVENTS = 1000
EVERY = 10  # one event in EVERY matches the subscription's filter


def test_a_durable_subscriber_back_at_its_broker_catches_up_from_the_pfs(tmp_path):
    with Cluster(tmp_path / "cluster", 3, LOCAL_LIVENESS) as cluster:
        home = cluster[2]
        with sync.connect(cluster[0].address, follow_advice=False) as pub:
            with sync.connect(home.address, follow_advice=False) as client:
                sub = client.subscribe("pfs/#", filter="v = 0", durable=True)
                first = pub.publish("pfs/a", b"", {"v": 0})
                assert sub.get(timeout=15).tick == first.tick
                token = sub.token
            # away: its registration keeps it recorded (and its interest upstream)
            sent = pub.publish_many([("pfs/a", b"", {"v": i % EVERY}) for i in range(AWAY_EVENTS)])
            matching = [r.tick for i, r in enumerate(sent) if i % EVERY == 0]
            wait_for(lambda: home.status().get("pfs_records_written", 0) >= 1 + len(matching), 20,
                     what="the home broker recorded the matches")
            with sync.connect(home.address, follow_advice=False) as client:
                sub = client.subscribe("pfs/#", filter="v = 0", token=token)
                got = [sub.get(timeout=15).tick for _ in matching]
                assert got == matching
                later = pub.publish("pfs/a", b"", {"v": 0})
                assert sub.get(timeout=15).tick == later.tick  # nothing else, nothing twice
            status = home.status()
            assert status["pfs_catchups"] >= 1
            assert status["pfs_ticks_silenced"] > 0  # the ticks that did not match were not fetched
            # the same token on a broker that never recorded it: refiltered, the same events
            with sync.connect(cluster[1].address, follow_advice=False) as client:
                sub = client.subscribe("pfs/#", filter="v = 0", token=token)
                assert [sub.get(timeout=15).tick for _ in range(len(matching) + 1)] == [*matching, later.tick]
            assert cluster[1].status()["pfs_catchups"] == 0
