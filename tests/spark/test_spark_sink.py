"""End to end: `df.write` and `df.writeStream` `.format("tidings")` into a real broker process.

Every check reads the events back (with a bounded read, as `tidings sub --from start` does) and counts each row's
payload: each must be there exactly once, after task retries, a re-run write and a replayed
micro-batch. The shared session is `local[2,2]`, so a failed task is retried as on a cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tidings import sync
from tidings.testing import BrokerProcess

pytestmark = pytest.mark.spark

QUERY_S_MAX = 120.0


@pytest.fixture(scope="module")
def broker(start_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    return start_broker()


def payloads(broker: BrokerProcess, pattern: str) -> Counter[bytes]:
    """How often each payload is in the broker's log on channels matching `pattern`."""
    with sync.connect(broker.address, service="test", instance="check") as client:
        return Counter(event.payload for event in client.read(pattern, after=0))


def duplicates(broker: BrokerProcess) -> int:
    return int(broker.status()["dedup_duplicates"])


def test_batch_write_with_a_retried_task_and_a_rerun_publishes_each_row_once(spark: Any, broker: BrokerProcess) -> None:
    rows = [(f"sink/batch/{i % 4}", f"row {i}".encode(), {"i": float(i), "half": i / 2}) for i in range(120)]
    df = spark.createDataFrame(rows, "channel string, payload binary, attributes map<string, double>")

    def write(**options: str) -> None:
        (df.write.format("tidings").mode("append").option("broker", broker.address).option("writeId", "nightly-1")
         .option("rowsPerPublish", "20").options(**options).save())

    before = duplicates(broker)
    write(testOnlyFailFirstAttempt="true")  # each task's first attempt dies after publishing 20 rows
    retried = duplicates(broker) - before
    write()  # the same write again: every row is a duplicate
    rerun = duplicates(broker) - before - retried

    with sync.connect(broker.address, service="test", instance="check") as client:
        back = list(client.read("sink/batch/#", after=0))
    assert Counter(event.payload for event in back) == Counter(p for _c, p, _a in rows)
    assert {(e.channel, e.payload, e.attributes["i"], e.attributes["half"]) for e in back} == \
        {(c, p, a["i"], a["half"]) for c, p, a in rows}
    assert retried == 2 * 20  # both partitions' retries found their first 20 rows published
    assert rerun == 120


def test_columns_are_checked_on_the_driver_with_one_line(spark: Any, broker: BrokerProcess) -> None:
    df = spark.createDataFrame([("sink/bad", 1)], "channel string, payload int")
    with pytest.raises(Exception, match="tidings sink: column 'payload' must be binary or string, got int"):
        df.write.format("tidings").mode("append").option("broker", broker.address).save()


def test_a_streaming_query_restarted_and_replaying_a_batch_publishes_each_row_once(
        spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    """tidings -> Spark -> tidings: events on in/# republished on out/#. The query runs, more events
    come, the checkpoint loses its last commit (so Spark replays that micro-batch with the same
    batch id), and the query is restarted from the checkpoint."""
    from pyspark.sql import functions as F

    checkpoint = tmp_path / "checkpoint"

    def publish(start: int, count: int) -> None:
        with sync.connect(broker.address, service="test", instance="in") as client:
            client.publish_many([("in/x", f"event {i}".encode(), {"i": i}) for i in range(start, start + count)])

    def run() -> None:
        events = (spark.readStream.format("tidings").option("broker", broker.address).option("pattern", "in/#")
                  .option("durableName", "sink-test").option("startingOffsets", "earliest").load())
        query = (events.select(F.concat(F.lit("out/"), "channel").alias("channel"), "payload", "attributes")
                 .writeStream.format("tidings").option("broker", broker.address)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert query.awaitTermination(QUERY_S_MAX), "the query did not end"
        assert query.exception() is None

    publish(0, 30)
    run()
    commits = sorted((checkpoint / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = commits[-1]
    assert last.name.isdigit()
    last.unlink()  # Spark now holds that micro-batch as planned and not committed: it runs it again
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    publish(30, 20)
    before = duplicates(broker)
    run()
    assert payloads(broker, "out/#") == Counter(f"event {i}".encode() for i in range(50))
    assert duplicates(broker) - before == 30  # the replayed micro-batch held the first 30 events
