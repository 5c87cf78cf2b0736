"""A streaming query over real brokers that die: it says so, shows the lag, rides through the loss
of its own broker, and runs no micro-batch while there is nothing to read.

Each query runs with a 200 ms processingTime trigger and collects with foreachBatch; the tests
wait on what was collected (with deadlines), and compare (pubend, tick) pairs with what was
published.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import SparkStderr
from tests.spark.test_spark_stream import Collected, publish, start_query
from tidings import sync
from tidings.testing import BrokerProcess, wait_for

pytestmark = pytest.mark.spark

TRIGGER = "200 milliseconds"
COLLECT_S_MAX = 90.0  # a micro-batch on a loaded 2-core machine, the session's first one included
IDLE_S = 3.0  # about 15 triggers


@contextmanager
def streaming(spark: Any, broker: str, checkpoint: Path, name: str, **options: str) -> Iterator[tuple[Collected, Any]]:
    collected, query = start_query(spark, broker, checkpoint, name, {"processingTime": TRIGGER}, **options)
    try:
        yield collected, query
    finally:
        query.stop()


def collects(query: Any, collected: Collected, expected: list[tuple[str, int]], what: str) -> None:
    """Wait until the query has read every event of `expected`; fail at once if it stopped."""
    def done() -> bool:
        if not query.isActive:
            raise AssertionError(f"the query stopped: {query.exception()}")
        return set(expected) <= set(collected.rows)

    wait_for(done, timeout=COLLECT_S_MAX, interval=0.1, what=what)


def progress_of(query: Any) -> dict[str, Any]:
    offset = query.lastProgress["sources"][0]["latestOffset"]
    return json.loads(offset) if isinstance(offset, str) else offset  # type: ignore[no-any-return]


def said(stderr: SparkStderr, mark: int, text: str) -> int:
    return sum(text in line for line in stderr.since(mark))


@pytest.fixture
def pair(start_broker: Callable[..., BrokerProcess]) -> tuple[BrokerProcess, BrokerProcess]:
    """Two brokers in one overlay, for one test (they are killed)."""
    first = start_broker()
    second = start_broker(join=first.address)
    wait_for(lambda: second.address in {leaf[1] for leaf in first.status()["overlay"]["leaf_set"]}, timeout=30,
             what="the second broker in the first one's leaf set")
    return first, second


def test_an_idle_stream_runs_no_micro_batch(
    spark: Any, start_broker: Callable[..., BrokerProcess], tmp_path: Path,
) -> None:
    broker = start_broker()
    with streaming(spark, broker.address, tmp_path / "cp", "idle") as (collected, query):
        wait_for(lambda: query.lastProgress is not None, timeout=COLLECT_S_MAX, what="the query's first trigger")
        first = publish((broker,), 20, "a")
        assert broker.status()["last_event_tick"] == max(tick for _, tick in first)  # what says "nothing new"
        collects(query, collected, first, "the first events")
        batches = len(collected.batches)
        with sync.connect(broker.address, service="test", instance="other") as client:
            for _ in range(int(IDLE_S / 0.2)):  # other channels' events, one per trigger: nothing to read
                client.publish("other/x", b"x")
                assert not query.awaitTermination(0.2)  # a trigger's time: the idle spell itself is the test
        assert len(collected.batches) == batches, "micro-batches ran with nothing to read"
        second = publish((broker,), 10, "b")
        collects(query, collected, second, "the events after the idle spell")
    # Spark runs batch 0 of a new query whatever the source says (from its start to the first
    # offset, the same here): empty when nothing was new. Every later one had rows.
    assert all(collected.batches[1:]), [len(b) for b in collected.batches]
    assert sorted(collected.rows) == sorted(first + second)


def test_a_broker_down_is_said_once_and_its_lag_shows_while_the_others_go_on(
    spark: Any, pair: tuple[BrokerProcess, BrokerProcess], spark_stderr: SparkStderr, tmp_path: Path,
) -> None:
    named, other = pair
    mark = spark_stderr.count
    with streaming(spark, named.address, tmp_path / "cp", "outage") as (collected, query):
        wait_for(lambda: query.lastProgress is not None, timeout=COLLECT_S_MAX, what="the query's first trigger")
        published = publish(pair, 20, "a")
        collects(query, collected, published, "events of both brokers")
        other.kill()
        during = []
        for round_ in range(3):  # a few micro-batches while it is down
            during += publish((named,), 5, f"d{round_}")
            collects(query, collected, during, "the reachable broker's events")
        progress = progress_of(query)
        assert progress["unreachable"] == [other.pubend], progress
        lag = progress["pubends"][other.pubend]
        assert lag["reachable"] is False and lag["broker"] == other.address and lag["behind_ticks"] > 0, lag
        assert progress["pubends"][named.pubend]["behind_events"] == 0
        text = f"pubend {other.pubend} at {other.address} is not reachable"
        wait_for(lambda: said(spark_stderr, mark, text), timeout=10, what="the warning on stderr")
        other.start()
        after = publish(pair, 20, "b")
        collects(query, collected, after, "both brokers' events after the restart")
        assert said(spark_stderr, mark, text) == 1
        assert said(spark_stderr, mark, f"pubend {other.pubend} at {other.address} is reachable again")
    rows = collected.rows
    assert len(rows) == len(set(rows)) and sorted(rows) == sorted(published + during + after)


def test_a_query_rides_through_its_own_brokers_kill_9_and_restart_twice(
    spark: Any, pair: tuple[BrokerProcess, BrokerProcess], tmp_path: Path,
) -> None:
    named, other = pair
    published: list[tuple[str, int]] = []
    with streaming(spark, named.address, tmp_path / "cp", "failover", brokers=other.address) as (collected, query):
        wait_for(lambda: query.lastProgress is not None, timeout=COLLECT_S_MAX, what="the query's first trigger")
        published += publish(pair, 20, "start")
        collects(query, collected, published, "events of both brokers")
        for cycle in range(2):
            named.kill()
            published += publish((other,), 10, f"down{cycle}")
            collects(query, collected, published, f"the other broker's events while the named one is down ({cycle})")
            named.start()
            published += publish(pair, 20, f"back{cycle}")
            collects(query, collected, published, f"both brokers' events after the restart ({cycle})")
        assert query.isActive and query.exception() is None
    rows = collected.rows
    assert len(rows) == len(set(rows)), "an event was read twice"
    assert sorted(rows) == sorted(published)
