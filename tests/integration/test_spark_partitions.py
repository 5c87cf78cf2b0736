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


def test_a_batch_read_from_and_to_offsets(tmp_path: Path) -> None:
    """startingOffsets / endingOffsets bound each pubend on its own: a JSON {pubend: tick}, a
    checkpoint token (whose default covers the pubends it does not name) and a streaming offset."""
    import json

    from tidings.core.durable.checkpoint import Checkpoint
    from tidings.spark.offsets import Offset

    with Cluster(tmp_path, 2) as cluster:
        ticks: dict[str, list[int]] = {}
        for i, broker in enumerate(cluster.brokers):
            with sync.connect(broker.address, service="test", instance=f"pub-{i}") as client:
                for r in client.publish_many([(f"load/h{k % 3}", b"x", {}) for k in range(300)]):
                    ticks.setdefault(r.pubend, []).append(r.tick)
        (pa, a), (pb, b) = sorted(ticks.items())

        def read(**options: str) -> collections.Counter[tuple[str, int]]:
            from tidings.spark.arrow import EVENT_SCHEMA
            from tidings.spark.options import parse_read_options
            from tidings.spark.source import TidingsReader

            reader = TidingsReader(parse_read_options({"broker": cluster[0].address, "pattern": "load/#",
                                                       "partitions": "3", **options}), EVENT_SCHEMA)
            got: collections.Counter[tuple[str, int]] = collections.Counter()
            for part in reader.partitions():
                for batch in reader.read(part):
                    got.update(zip(batch.column("pubend").to_pylist(), batch.column("tick").to_pylist(), strict=True))
            return got

        def rows(pubend: str, chosen: list[int]) -> collections.Counter[tuple[str, int]]:
            return collections.Counter((pubend, t) for t in chosen)

        # after a[99] and through a[199] for pa; pb not named: from its first event to its tail
        got = read(startingOffsets=json.dumps({pa: a[99]}), endingOffsets=json.dumps({pa: a[199]}))
        assert got == rows(pa, a[100:200]) + rows(pb, b)
        # a token: pb after b[249], every other pubend (pa) after the default a[9]
        got = read(startingOffsets=Checkpoint(a[9], {pb: b[249]}).encode(), endingOffsets="latest")
        assert got == rows(pa, a[10:]) + rows(pb, b[250:])
        # a streaming query's offset as the end, from the earliest
        end = Offset.make(0, {pa: a[4], pb: b[0]}).to_json()
        assert read(startingOffsets="earliest", endingOffsets=json.dumps(end)) == rows(pa, a[:5]) + rows(pb, b[:1])
        assert read(startingOffsets=json.dumps({pa: a[-1], pb: b[-1]})) == collections.Counter()
