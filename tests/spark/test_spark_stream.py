"""End to end: `spark.readStream.format("tidings")` over real broker processes.

Each query runs with Trigger.AvailableNow and collects with foreachBatch, so a test waits for the
query to end, never for a time; every check compares (pubend, tick) pairs with what was published.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tidings import sync
from tidings.testing import BrokerProcess, wait_for

pytestmark = pytest.mark.spark

QUERY_S_MAX = 120.0


@pytest.fixture(scope="module")
def overlay(start_broker: Callable[..., BrokerProcess]) -> tuple[BrokerProcess, BrokerProcess]:
    """Two brokers in one overlay: the query names the first, events are logged by both."""
    first = start_broker()
    second = start_broker(join=first.address)

    def joined() -> bool:
        leaves = {leaf[1] for leaf in first.status().get("overlay", {}).get("leaf_set", [])}
        return second.address in leaves

    wait_for(joined, timeout=30, what="the second broker in the first one's leaf set")
    return first, second


def publish(brokers: tuple[BrokerProcess, ...], count: int, tag: str) -> list[tuple[str, int]]:
    """`count` events spread over the brokers' pubends; their (pubend, tick)."""
    out = []
    for i, broker in enumerate(brokers):
        with sync.connect(broker.address, service="test", instance=tag) as client:
            share = count // len(brokers) + (1 if i < count % len(brokers) else 0)
            results = client.publish_many([(f"load/h{k % 3}", b"x", {"k": k}) for k in range(share)])
            out += [(r.pubend, r.tick) for r in results]
    return out


class Collected:
    """What foreachBatch saw: per micro-batch, its (pubend, tick) rows."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches.append([(r["pubend"], r["tick"]) for r in df.select("pubend", "tick").collect()])

    @property
    def rows(self) -> list[tuple[str, int]]:
        return [row for batch in self.batches for row in batch]


def start_query(spark: Any, broker: str, checkpoint: Path, name: str, trigger: dict[str, Any],
                **options: str) -> tuple[Collected, Any]:
    """A query of `load/#` through `broker` under durable name `name`, its batches collected."""
    reader = (spark.readStream.format("tidings").option("broker", broker).option("pattern", "load/#")
              .option("durableName", name))
    for key, value in options.items():
        reader = reader.option(key, value)
    collected = Collected()
    query = (reader.load().writeStream.foreachBatch(collected).option("checkpointLocation", str(checkpoint))
             .trigger(**trigger).start())
    return collected, query


def run_available_now(spark: Any, broker: str, checkpoint: Path, name: str, **options: str) -> tuple[Collected, Any]:
    collected, query = start_query(spark, broker, checkpoint, name, {"availableNow": True}, **options)
    try:
        assert query.awaitTermination(QUERY_S_MAX), "the AvailableNow query did not end"
    finally:
        query.stop()
    return collected, query


def end_offset(query: Any) -> dict[str, Any]:
    """The source's offset after the query's last micro-batch, as Spark reports it."""
    offset = query.lastProgress["sources"][0]["endOffset"]
    return json.loads(offset) if isinstance(offset, str) else offset  # type: ignore[no-any-return]


def test_available_now_reads_every_event_of_the_overlay_once_in_bounded_batches(
    spark: Any, overlay: tuple[BrokerProcess, BrokerProcess], tmp_path: Path,
) -> None:
    published = publish(overlay, 100, "a")
    assert len({p for p, _ in published}) == 2
    got, query = run_available_now(spark, overlay[0].address, tmp_path / "cp", "all-once",
                                   startingOffsets="earliest", maxEventsPerTrigger="40")
    assert sorted(got.rows) == sorted(published)
    sizes = [len(b) for b in got.batches]
    assert max(sizes) <= 40 and len([s for s in sizes if s]) >= 3, sizes
    assert end_offset(query)["lost"] == {"ranges": 0, "ticks": 0}


def test_a_restarted_query_reads_each_event_once_while_events_are_published(
    spark: Any, overlay: tuple[BrokerProcess, BrokerProcess], tmp_path: Path,
) -> None:
    before = publish(overlay, 10, "old")  # before the query was created: "latest" leaves them out
    checkpoint, runs = tmp_path / "cp", []
    runs.append(run_available_now(spark, overlay[0].address, checkpoint, "restarts")[0])
    published: list[tuple[str, int]] = []
    stop = threading.Event()

    def publisher() -> None:
        for round_ in range(200):  # bounded; stopped sooner
            if stop.is_set():
                return
            published.extend(publish(overlay, 6, f"p{round_}"))

    thread = threading.Thread(target=publisher, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(published) >= 30, timeout=30, what="events published")
        runs.append(run_available_now(spark, overlay[0].address, checkpoint, "restarts")[0])
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    runs.append(run_available_now(spark, overlay[0].address, checkpoint, "restarts")[0])
    rows = [row for run in runs for row in run.rows]
    assert len(rows) == len(set(rows)), "an event was read twice"
    assert sorted(rows) == sorted(published)
    assert not set(before) & set(rows)
    assert runs[1].rows and runs[2].rows  # the restarts had work to do


def test_released_events_fail_the_query_or_are_skipped_and_counted(
    spark: Any, start_broker: Callable[..., BrokerProcess], tmp_path: Path,
) -> None:
    broker = start_broker({"segment_bytes_max": 4096, "retention_bytes_max": 8192,
                           "retention_check_interval_ns": 50_000_000})
    with sync.connect(broker.address, service="test", instance="pub") as client:
        first = client.publish("load/h1", b"x" * 100).tick
        events = [(r.pubend, r.tick) for _ in range(10)  # in chunks: a batch is never split over segments
                  for r in client.publish_many([("load/h1", b"x" * 100)] * 30)]
        wait_for(lambda: client.status()["released_through"] > first, timeout=20,
                 what="retention releasing the oldest events")
    start = "1970-01-01T00:00:00Z"  # long before anything was released
    with pytest.raises(Exception, match=r"(?s)released by the broker's retention.*ticks \(0, \d+\].*failOnDataLoss"):
        run_available_now(spark, broker.address, tmp_path / "fail", "fails", startingOffsets=start)
    got, query = run_available_now(spark, broker.address, tmp_path / "skip", "skips", startingOffsets=start,
                                   failOnDataLoss="false")
    lost = end_offset(query)["lost"]
    assert lost["ranges"] == 1 and lost["ticks"] > first
    every = [(events[0][0], first), *events]
    assert 0 < len(got.rows) < len(every)
    assert sorted(got.rows) == every[-len(got.rows):]  # all that was kept, each once
