"""End to end: `spark.read.format("tidings")` through one broker of a three-broker overlay, and
early-stopping actions that leave nothing on stderr."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import pytest

from tidings import sync
from tidings.testing import Cluster, wait_for

pytestmark = pytest.mark.spark

EVENTS_PER_BROKER = 4500  # more than one Arrow batch (4096 rows) per task, so limit(5) stops a task early
NOISE = ("Traceback", "Error", "Event loop is closed", "never awaited", "Exception ignored", "tidings/")
# PySpark's own daemon prints this when Spark drops a worker whose task had already written all its
# rows into the socket (the worker fails its final flush); no data source code runs by then.
PYSPARK_FLUSH_TRACEBACK = ("Traceback (most recent call last):", "pyspark/daemon.py",
                           "BrokenPipeError: [Errno 32] Broken pipe",
                           "ConnectionResetError: [Errno 104] Connection reset by peer")


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, list[tuple[str, int]]]]:
    """Three brokers in one overlay, each with its own pubend's events: (cluster, (pubend, tick)s)."""
    with Cluster(tmp_path_factory.mktemp("overlay"), 3) as cluster:
        published: list[tuple[str, int]] = []
        for i, broker in enumerate(cluster.brokers):
            with sync.connect(broker.address, service="test", instance=f"pub-{i}") as client:
                items = [(f"load/h{k % 4}", b"x" * 20, {"k": k}) for k in range(EVENTS_PER_BROKER)]
                published += [(r.pubend, r.tick) for r in client.publish_many(items)]
        yield cluster, published


def read(spark: Any, address: str, **options: str) -> Any:
    reader = spark.read.format("tidings").option("broker", address).option("pattern", "load/#")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_read_through_one_broker_returns_every_event_of_every_pubend_once(
    spark: Any, overlay: tuple[Cluster, list[tuple[str, int]]],
) -> None:
    """Also a job started as `.venv/bin/python job.py` without an activated venv: Spark's workers
    run `python3` from the PATH, which has no tidings (here: an interpreter that does not exist);
    `register` gives the data source's workers the job's own interpreter."""
    from tidings.spark import register

    cluster, published = overlay
    sc = spark.sparkContext
    configured = sc.pythonExec
    sc.pythonExec = "/nonexistent/bin/python3"
    try:
        register(spark)
    finally:
        sc.pythonExec = configured
    rows = read(spark, cluster[1].address, startTick="0", partitions="4").select("pubend", "tick").collect()
    got = collections.Counter((r["pubend"], r["tick"]) for r in rows)
    assert len({p for p, _ in published}) == 3
    assert max(got.values()) == 1 and sorted(got) == sorted(published)


def test_limit_and_show_stop_early_without_noise(
    spark: Any, spark_stderr: Any, overlay: tuple[Cluster, list[tuple[str, int]]],
) -> None:
    cluster, _ = overlay
    df = read(spark, cluster[0].address, partitions="3")
    mark = spark_stderr.count
    assert len(df.limit(5).collect()) == 5
    df.show(3)
    # A worker whose task was stopped early would print as Spark drops its socket, which happens
    # before the action returns; a later job's worker writes a marker after it, through the same pipe.
    marker = "tidings-test-stderr-marker"
    spark.sparkContext.parallelize([0], 1).foreach(lambda _: __import__("sys").stderr.write(marker + "\n"))
    wait_for(lambda: any(marker in line for line in spark_stderr.since(mark)), timeout=30,
             what="the marker written by a later Python worker")
    lines = [line for line in spark_stderr.since(mark) if not any(k in line for k in PYSPARK_FLUSH_TRACEBACK)]
    noise = [line for line in lines if any(word in line for word in NOISE)]
    assert noise == []

