"""A batch read's tasks, planned against a real overlay whose pubends hold very different numbers
of events, each get about the mean: the cutting by event counts (planning.balance) on real tick
marks and record counts. Planning and reading run in this process (no JVM): the reader's
`partitions()` is what Spark's driver calls, its `read(partition)` what each task runs."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from tidings import sync
from tidings.testing import Cluster

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install -e '.[spark]')")

pytestmark = pytest.mark.integration

SHARES = (0.66, 0.335, 0.005)  # of the events, per broker: the overlay (705,400 / 1,051,902 on one)


def publish_skewed(cluster: Cluster, events: int) -> dict[str, int]:
    """`events` events over the brokers in SHARES, in interleaved batches; events per pubend."""
    counts: collections.Counter[str] = collections.Counter()
    clients = [sync.connect(b.address, service="test", instance=f"pub-{i}") for i, b in enumerate(cluster.brokers)]
    try:
        left = [round(events * share) for share in SHARES]
        while any(left):
            for i, client in enumerate(clients):
                batch = min(left[i], max(1, round(2000 * SHARES[i])))
                if batch:
                    items = [(f"load/h{k % 50}", b"x" * 60, {"load": k % 7}) for k in range(batch)]
                    results = client.publish_many(items)
                    counts.update(r.pubend for r in results)
                    left[i] -= batch
    finally:
        for client in clients:
            client.close()
    return dict(counts)


def task_rows(address: str, partitions: int, **options: str) -> tuple[list[int], collections.Counter[str]]:
    from tidings.spark.arrow import EVENT_SCHEMA
    from tidings.spark.options import parse_read_options
    from tidings.spark.source import TidingsReader

    reader = TidingsReader(parse_read_options({"broker": address, "pattern": "load/#",
                                               "partitions": str(partitions), **options}), EVENT_SCHEMA)
    rows, per_pubend = [], collections.Counter[str]()
    for part in reader.partitions():
        count = 0
        for batch in reader.read(part):
            count += batch.num_rows
            per_pubend.update(batch.column("pubend").to_pylist())
        rows.append(count)
    return rows, per_pubend


def check_balanced(root: Path, events: int) -> None:
    with Cluster(root, 3) as cluster:
        published = publish_skewed(cluster, events)
        assert len(published) == 3 and max(published.values()) > 100 * min(published.values())
        for partitions in (2, 8):
            rows, read = task_rows(cluster[1].address, partitions)
            assert read == published  # every event once (the tasks' ranges tile every log)
            mean = sum(rows) / len(rows)
            assert len(rows) == partitions and max(rows) <= 2 * mean, (partitions, rows)


def test_partitions_8_over_a_skewed_overlay_give_no_task_twice_the_mean(tmp_path: Path) -> None:
    check_balanced(tmp_path, 100_000)


@pytest.mark.soak
def test_partitions_8_over_a_million_event_overlay(tmp_path: Path) -> None:
    check_balanced(tmp_path, 1_000_000)
