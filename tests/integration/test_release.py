"""The release protocol with real processes: a pubend's log keeps what an away durable subscriber
has not acknowledged (through a move to another broker and a kill -9 of its own broker), drops it
once the subscriber acknowledged it, and early release turns what an away subscriber outstayed into
an explicit gap, while a subscriber that keeps up never gets one."""

import pytest

from tidings import sync
from tidings.client.client import Gap
from tidings.testing import LOCAL_LIVENESS, Cluster, wait_for

pytestmark = pytest.mark.integration

RELEASING = LOCAL_LIVENESS | {
    "segment_bytes_max": 16 * 1024,
    "release_keep_ns": 1,  # released events go at once (the default keeps them an hour for replays)
    "durable_save_interval_ns": 50_000_000,
    # a new root is trusted after 8 s (default 5 min): longer than a loaded machine takes to restart
    # the killed home, shorter than the waits below
    "release_hold_ns": 8_000_000_000,
}
PAYLOAD = b"r" * 200
BATCHES, PER_BATCH = 20, 50


def publish(pub, channel="rel/a"):
    """Events in several batches, so the log has several segments; their ticks."""
    return [r.tick for _ in range(BATCHES) for r in pub.publish_many([(channel, PAYLOAD)] * PER_BATCH)]


def source(broker):
    return broker.status()["delivery"]


def settled(broker, through):
    """The pubend has heard from the tree's root about everything through `through` (its ack, and
    so the release point the tree reports): what it releases now is its decision, not a delay."""
    return lambda: source(broker)["delivered"] >= through and broker.status()["pending_sync_batches"] == 0


def released(broker):
    return broker.status()["released_through"]


def receive(sub, count):
    items = []
    while len(items) < count:
        item = sub.get(timeout=20)
        assert item is not None
        items.append(item)
    return items


def test_an_away_durable_subscriber_holds_the_log_across_a_move_and_a_kill_then_its_ack_releases_it(tmp_path):
    with Cluster(tmp_path / "cluster", 3, RELEASING) as cluster:
        origin, home, elsewhere = cluster[0], cluster[2], cluster[1]
        with sync.connect(home.address, follow_advice=False) as client:
            sub = client.subscribe("rel/#", durable=True)
            token = sub.token
        with sync.connect(origin.address, follow_advice=False) as pub:
            ticks = publish(pub)
            wait_for(settled(origin, ticks[-1]), 30, what="the tree's acks reached the pubend")
            assert released(origin) < ticks[0], "released what an away durable subscriber had not consumed"
            assert home.status()["durable_away"] == 1

            home.kill()  # the registration is saved: it holds release after a restart too
            home.start()
            more = publish(pub)
            wait_for(settled(origin, more[-1]), 30, what="the acks after the restart")
            assert released(origin) < ticks[0]

            with sync.connect(elsewhere.address, follow_advice=False) as client:  # resumes elsewhere
                sub = client.subscribe("rel/#", token=token)
                got = receive(sub, len(ticks) + len(more))
                assert [e.tick for e in got] == ticks + more
                wait_for(lambda: home.status()["durable_registrations"] == 0, 15,
                         what="the old home forgot the registration (MOVED)")
                assert released(origin) < ticks[0]  # consumed, not yet acknowledged
                sub.ack()
                wait_for(lambda: released(origin) >= ticks[len(ticks) // 2], 30,
                         what="the acknowledged events were released")
                assert released(origin) <= more[-1]


def test_a_durable_subscription_is_on_disk_before_subscribed_names_it(tmp_path):
    """kill -9 of its broker right after SUBSCRIBED: the registration is there after the restart
    (the periodic save, 10 s here, is not what saved it)."""
    with Cluster(tmp_path / "cluster", 1, RELEASING | {"durable_save_interval_ns": 10_000_000_000}) as cluster:
        home = cluster[0]
        with sync.connect(home.address, follow_advice=False) as client:
            client.subscribe("rel/#", durable=True)
            home.kill()
        home.start()
        status = home.status()
        assert (status["durable_registrations"], status["durable_away"]) == (1, 1)


EARLY = RELEASING | {"max_retain_ns": 1_500_000_000}


def test_early_release_gives_an_away_subscriber_a_gap_and_one_that_keeps_up_none(tmp_path):
    with Cluster(tmp_path / "cluster", 3, EARLY) as cluster:
        origin = cluster[0]
        with sync.connect(cluster[1].address, follow_advice=False) as keeper, \
                sync.connect(cluster[2].address, follow_advice=False) as client:
            kept = keeper.subscribe("rel/#", durable=True, on_gap="event")
            away = client.subscribe("rel/#", durable=True)
            token = away.token
            away.close()
            with sync.connect(origin.address, follow_advice=False) as pub:
                ticks = publish(pub)
                got = receive(kept, len(ticks))
                assert [e.tick for e in got] == ticks  # no gap, nothing missing
                kept.ack()
                wait_for(lambda: released(origin) >= ticks[len(ticks) // 2], 30,
                         what="early release passed the away subscriber's position")
                later = pub.publish("rel/a", PAYLOAD).tick
                assert kept.get(timeout=20).tick == later
            with sync.connect(cluster[1].address, follow_advice=False) as again:
                resumed = again.subscribe("rel/#", token=token, on_gap="event")
                gap = resumed.get(timeout=20)
                assert isinstance(gap, Gap) and gap.pubend == origin.pubend and gap.through >= released(origin) - 1
                rest = receive(resumed, len([t for t in ticks if t > gap.through]) + 1)
                assert [e.tick for e in rest] == [t for t in ticks if t > gap.through] + [later]
