"""The streaming read and the sink together: events/s from publish to the sink's commit with a 1 s
trigger, and the latency from publish to the row appearing in the sink.

    .venv/bin/python bench/spark_stream_bench.py [--rate 1000] [--seconds 20] [--backlog 200000]

Starts a fresh broker process and a local[2] SparkSession running one query: `in/#` read with
`spark.readStream.format("tidings")` (a durable subscription), republished on `out/<channel>` with
`df.writeStream.format("tidings")`, trigger `processingTime="1 second"`. A subscriber to `out/#`
on the same broker stamps each event as it arrives; every input event carries its publish time
(wall clock, nanoseconds, taken just before its `publish_many`) as attribute `t`, which the query
carries through.

- latency: `--rate` events/s published for `--seconds` s (a `publish_many` of rate/10 events every
  100 ms); p50, p99 and max of (arrival at the subscriber - publish time).
- throughput: `--backlog` events published as fast as one client can; events/s from the first
  publish to the arrival of the last one at the subscriber (the publishing overlaps the query).

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from tidings import sync
from tidings.testing import BrokerProcess

sys.path.insert(0, str(Path(__file__).parent))
from spark_local import local_session

WAIT_S_MAX = 120.0


class Arrivals(threading.Thread):
    """Subscribes to out/# and records (arrival ns, publish ns) of each event, by phase."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.client = sync.connect(address, service="bench", instance="arrivals")
        self.sub = self.client.subscribe("out/#")
        self.seen: dict[str, list[tuple[int, int]]] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                event = self.sub.get(timeout=0.2)
            except TimeoutError:
                continue
            if event is None:
                return
            now = time.time_ns()
            self.seen.setdefault(event.payload.decode(), []).append((now, int(event.attributes["t"])))

    def wait(self, phase: str, count: int) -> list[tuple[int, int]]:
        deadline = time.monotonic() + WAIT_S_MAX
        while len(self.seen.get(phase, ())) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.seen.get(phase, ()))} of {count} {phase} events in the sink")
            time.sleep(0.05)
        return self.seen[phase]

    def stop(self) -> None:
        self.halt.set()
        self.join(10)
        self.client.close()


def publish(client: sync.SyncClient, phase: str, count: int) -> None:
    t = time.time_ns()
    client.publish_many([("in/bench", phase.encode(), {"t": t}) for _ in range(count)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--backlog", type=int, default=200_000)
    args = ap.parse_args()
    from pyspark.sql import functions as F

    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "data") as broker:
        spark = local_session(Path(__file__).stem)
        arrivals = Arrivals(broker.address)
        arrivals.start()
        events = (spark.readStream.format("tidings").option("broker", broker.address).option("pattern", "in/#")
                  .option("durableName", "bench").option("startingOffsets", "earliest").load())
        query = (events.select(F.concat(F.lit("out/"), "channel").alias("channel"), "payload", "attributes")
                 .writeStream.format("tidings").option("broker", broker.address)
                 .option("checkpointLocation", str(Path(tmp) / "checkpoint"))
                 .trigger(processingTime="1 second").start())
        with sync.connect(broker.address, service="bench", instance="in") as client:
            publish(client, "warm-up", 100)  # the query's first micro-batches start its Python workers
            arrivals.wait("warm-up", 100)
            chunk = max(1, args.rate // 10)
            rounds = int(args.seconds * 10)
            next_at = time.monotonic()
            for _ in range(rounds):
                publish(client, "latency", chunk)
                next_at += 0.1
                time.sleep(max(0.0, next_at - time.monotonic()))
            latencies = sorted((a - t) / 1e6 for a, t in arrivals.wait("latency", chunk * rounds))
            start_ns = time.time_ns()
            for offset in range(0, args.backlog, 1000):
                publish(client, "backlog", min(1000, args.backlog - offset))
            published_ns = time.time_ns()
            backlog = arrivals.wait("backlog", args.backlog)
        last_ns = max(a for a, _ in backlog)
        query.stop()
        arrivals.stop()
        spark.stop()
    print(json.dumps({
        "bench": "spark_stream", "trigger_s": 1, "rate": args.rate, "seconds": args.seconds,
        "latency_ms_p50": round(statistics.median(latencies)),
        "latency_ms_p99": round(latencies[int(0.99 * (len(latencies) - 1))]),
        "latency_ms_max": round(latencies[-1]),
        "backlog": args.backlog, "backlog_publish_s": round((published_ns - start_ns) / 1e9, 2),
        "backlog_events_per_s": round(args.backlog / ((last_ns - start_ns) / 1e9)),
        "load_average": os.getloadavg()[0],
    }))


if __name__ == "__main__":
    main()
