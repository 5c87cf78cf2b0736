"""A durable subscriber away for longer than a publisher's log keeps its events resumes on another
broker with an explicit gap for what retention removed, never a silent skip, and then goes on with
every event that is still retained."""

import pytest

from tidings import sync
from tidings.client.client import Gap
from tidings.core.errors import GapError
from tidings.testing import LOCAL_LIVENESS, Cluster, wait_for

pytestmark = pytest.mark.integration

SMALL_LOG = LOCAL_LIVENESS | {
    "segment_bytes_max": 16 * 1024,
    "retention_bytes_max": 48 * 1024,
    "retention_check_interval_ns": 50_000_000,
}
PAYLOAD = b"x" * 200


def status(broker):
    return broker.status()


def test_events_released_while_a_durable_subscriber_was_away_become_a_gap_with_their_pubend(tmp_path):
    with Cluster(tmp_path / "cluster", 3, SMALL_LOG) as cluster:
        publisher_broker = cluster[0]
        with sync.connect(publisher_broker.address, follow_advice=False) as pub:
            with sync.connect(cluster[1].address, follow_advice=False) as client:
                sub = client.subscribe("gap/#", durable=True, on_gap="event")
                first = pub.publish("gap/a", PAYLOAD)
                event = sub.get(timeout=10)
                assert (event.pubend, event.tick) == (first.pubend, first.tick)
                token = sub.token
            # away: enough is published for retention to remove the first segments, and then some
            acked = [r.tick for _ in range(20) for r in pub.publish_many([("gap/a", PAYLOAD)] * 50)]
            # retention done with what was published (its check may have run mid-publishing, and a
            # later one would release more while the subscriber catches up: a second gap)
            wait_for(lambda: (status(publisher_broker)["released_through"] or 0) > acked[100]
                     and status(publisher_broker)["log_bytes"] <= SMALL_LOG["retention_bytes_max"], 30,
                     what="retention released the oldest segments")
            released = status(publisher_broker)["released_through"]
            with sync.connect(cluster[2].address, follow_advice=False) as client:  # another broker
                sub = client.subscribe("gap/#", token=token, on_gap="event")
                gap = sub.get(timeout=15)
                assert isinstance(gap, Gap), f"expected a gap first, got {gap!r}"
                assert (gap.pubend, gap.after) == (first.pubend, first.tick)
                assert gap.through >= released
                rest = []
                while len(rest) < len([t for t in acked if t > gap.through]):
                    item = sub.get(timeout=15)
                    assert item is not None and not isinstance(item, Gap), item
                    rest.append(item.tick)
                assert rest == [t for t in acked if t > gap.through]  # everything retained, in order
                later = pub.publish("gap/a", PAYLOAD)
                assert sub.get(timeout=10).tick == later.tick
                resumed = sub.token
            # the token moved past the gap: resuming from it again gets no gap and nothing twice
            with sync.connect(cluster[1].address, follow_advice=False) as client:
                sub = client.subscribe("gap/#", token=resumed)  # on_gap="raise"
                last = pub.publish("gap/a", PAYLOAD)
                assert sub.get(timeout=10).tick == last.tick
            # an old token again, with the default on_gap: a GapError naming the pubend
            with sync.connect(cluster[1].address, follow_advice=False) as client:
                sub = client.subscribe("gap/#", token=token)
                with pytest.raises(GapError) as err:
                    sub.get(timeout=15)
                assert err.value.pubend == first.pubend and first.pubend in str(err.value)
