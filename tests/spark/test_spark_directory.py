"""End to end: with one broker of three killed -9, `spark.read.format("tidings")` through another
fails naming the dead broker's pubend and address; with failOnDataLoss=false the read and an
AvailableNow run return every event of the others once, and the user sees the warning naming it.
(The planning behind it is tested without Spark in tests/integration/test_spark_directory.py.)"""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.spark.test_spark_stream import run_available_now
from tidings import sync
from tidings.testing import BrokerProcess, wait_for

pytestmark = pytest.mark.spark

EVENTS_PER_BROKER = 200


def test_a_dead_brokers_pubend_fails_the_read_or_is_skipped_with_a_warning(
    spark: Any, spark_stderr: Any, start_broker: Callable[..., BrokerProcess], tmp_path: Path,
) -> None:
    first = start_broker()
    brokers = [first, start_broker(join=first.address), start_broker(join=first.address)]
    published: dict[str, list[int]] = {}
    for i, broker in enumerate(brokers):
        with sync.connect(broker.address, service="test", instance=f"pub-{i}") as client:
            acks = client.publish_many([(f"load/h{i}", b"x", {"k": k}) for k in range(EVENTS_PER_BROKER)])
            published[acks[0].pubend] = [a.tick for a in acks]
    wait_for(lambda: all({e["pubend"]: e["last_event_tick"] for e in b.status().get("directory", [])}
                         == {p: t[-1] for p, t in published.items()} for b in brokers),
             timeout=30, what="every directory holding every pubend's last event")
    dead = brokers[2]
    dead_pubend = str(dead.status()["pubend"])
    dead.kill()
    alive = sorted((p, t) for p, ts in published.items() if p != dead_pubend for t in ts)

    def read(**options: str) -> Any:
        reader = spark.read.format("tidings").option("broker", first.address).option("pattern", "load/#")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    with pytest.raises(Exception, match=f"pubend {dead_pubend} at {dead.address}.*failOnDataLoss"):
        read().count()
    mark = spark_stderr.count
    rows = read(failOnDataLoss="false").select("pubend", "tick").collect()
    got = collections.Counter((r["pubend"], r["tick"]) for r in rows)
    assert max(got.values()) == 1 and sorted(got) == alive
    wait_for(lambda: any(f"skipping pubend {dead_pubend} at {dead.address}" in line and "1 of 1 pubend(s) skipped"
                         in line for line in spark_stderr.since(mark)), timeout=10, what="the warning on stderr")

    collected, _query = run_available_now(spark, first.address, tmp_path / "cp", "directory",
                                          startingOffsets="earliest", failOnDataLoss="false")
    assert sorted(collected.rows) == alive
