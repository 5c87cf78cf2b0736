"""The batch read against Parquet: one aggregation over the same events, read from a broker with
`spark.read.format("tidings")` and from the same rows landed as Parquet, in one run.

    .venv/bin/python bench/spark_read_bench.py [--events 200000] [--rounds 3] [--partitions 2]
        [--brokers 3] [--minority]

Starts a fresh broker process and publishes `--events` events (`nodes/host<i mod 100>/load`, a
float `load` attribute, a 100-byte payload), starts a local[2] SparkSession, warms both reads up,
lands the tidings read as Parquet (every column), then times the aggregation of
tidings.spark.jobs.load_summary (per host: count, mean and max load) `--rounds` times over each
source, alternating: a tidings read of every column, one given the query's columns in its schema
(`channel` and `attributes`: Parquet prunes the others itself, a Python data source is not told which
a query uses), Parquet, and a tidings read that starts after every tick (planned as the others,
reading nothing: the fixed cost of a query). TIDINGS_NATIVE_DECODE=0 runs it with the tasks'
Python decoder alone (docs/spark.md). Prints one JSON line: the decoder, the best and median
seconds of each, rows/s, the ratio of the medians (tidings over Parquet), and the median CPU seconds each
query cost the processes of the run (the broker, the JVM, Spark's Python workers): on a shared
machine the wall times follow the other users' load, the CPU seconds much less.

`--brokers N` starts an overlay of N brokers (tidings.testing.Cluster) and publishes the events
through all of them in turn (two in three through the first, the rest spread over the others, as
uneven as real publishers), so the read plans over N pubends and its tasks read from N brokers.
`--minority` publishes two events on `nodes/host<i>/mem` (no `load`) after each matching one, so
the pattern matches a minority (one in three) of each log, spread through it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tidings import sync
from tidings.spark import arrow
from tidings.spark.jobs import SUMMARY_COLUMNS
from tidings.testing import BrokerProcess, Cluster

sys.path.insert(0, str(Path(__file__).parent))
from spark_local import local_session


def publish(addresses: str | list[str], events: int, minority: bool = False) -> None:
    """`events` matching events (and with `minority`, twice as many that do not match), 1000 to a
    publish_many, two batches in three through the first broker, the rest through the others."""
    clients = [sync.connect(a, service="bench", instance="read")
               for a in ([addresses] if isinstance(addresses, str) else addresses)]
    try:
        for n, start in enumerate(range(0, events, 1000)):
            client = clients[0 if n % 3 or len(clients) == 1 else 1 + (n // 3) % (len(clients) - 1)]
            stop = min(events, start + 1000)
            items = []
            for i in range(start, stop):
                items.append((f"nodes/host{i % 100}/load", b"x" * 100, {"load": (i % 997) / 100.0}))
                if minority:  # interleaved, as a log of several kinds of report holds them
                    items += [(f"nodes/host{i % 100}/mem", b"x" * 100, {"mem": i % 997})] * 2
            client.publish_many(items)
    finally:
        for client in clients:
            client.close()


def tree_cpu_s() -> float:
    """CPU seconds (user and system) of this process and every live process below it: the broker,
    the JVM, Spark's Python workers; on a shared machine a steadier figure than wall time."""
    children: dict[int, list[tuple[int, float]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            cpu = sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # with reaped children's
            children.setdefault(int(fields[1]), []).append((int(entry), cpu))
    total, pending = 0.0, [os.getpid()]
    while pending:
        for pid, cpu in children.get(pending.pop(), []):
            total += cpu
            pending.append(pid)
    return total + time.process_time()


QUERY_COLUMNS = SUMMARY_COLUMNS  # what summary() reads, as the job names them


def summary(df, F):  # the aggregation of tidings.spark.jobs.load_summary
    load = F.col("attributes").getItem("load").try_cast("double")
    return (df.select(F.split(F.col("channel"), "/", -1).getItem(1).alias("host"), load.alias("load"))
            .where(F.col("load").isNotNull() & ~F.isnan(F.col("load")))
            .groupBy("host").agg(F.count(F.lit(1)).alias("count"), F.avg("load"), F.max("load"))
            .orderBy(F.desc("avg(load)"), F.asc("host")).limit(10).collect())


def alike(rows: list[Any], others: list[Any]) -> bool:
    """The same summaries: hosts, counts and maxima equal, means within float rounding (a sum's
    order follows the partitions, so its last bits, and the order of near-equal means, may differ
    from one read to another)."""
    return len(rows) == len(others) and all(
        len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-12) if isinstance(x, float) else x == y
                                 for x, y in zip(a, b, strict=True))
        for a, b in zip(sorted(rows), sorted(others), strict=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--brokers", type=int, default=1, help="brokers in the overlay (1: one broker process)")
    ap.add_argument("--minority", action="store_true", help="the pattern matches one event in three")
    args = ap.parse_args()
    from pyspark.sql import functions as F

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if args.brokers > 1:
            brokers = stack.enter_context(Cluster(Path(tmp) / "overlay", args.brokers)).brokers
        else:
            brokers = [stack.enter_context(BrokerProcess(Path(tmp) / "data"))]
        broker = brokers[0]
        publish([b.address for b in brokers], args.events, args.minority)
        spark = local_session(Path(__file__).stem)

        def tidings(columns: str | None = None):
            reader = spark.read.format("tidings") if columns is None else spark.read.format("tidings").schema(columns)
            return (reader.option("broker", broker.address).option("pattern", "nodes/+/load")
                    .option("partitions", str(args.partitions)).load())

        def tidings_columns():  # the read names the columns the query uses (Spark cannot tell it)
            return tidings(QUERY_COLUMNS)

        landed = str(Path(tmp) / "events.parquet")
        start = time.perf_counter()
        tidings().write.parquet(landed)
        land_s = time.perf_counter() - start

        def parquet():
            return spark.read.parquet(landed)

        expected = summary(tidings(), F)  # warm-up of both
        assert alike(summary(parquet(), F), expected), "the two sources disagree"
        assert alike(summary(tidings_columns(), F), expected), "a read of the query's columns disagrees"

        def empty():  # planned like the others, past every tick: the fixed cost of a read
            return (spark.read.format("tidings").option("broker", broker.address).option("pattern", "nodes/+/load")
                    .option("startTick", str(2**62)).load())

        times: dict[str, list[float]] = {"tidings": [], "columns": [], "parquet": [], "empty": []}
        cpus: dict[str, list[float]] = {name: [] for name in times}
        for _ in range(args.rounds):
            for name, source in (("tidings", tidings), ("columns", tidings_columns), ("parquet", parquet),
                                 ("empty", empty)):
                cpu, start = tree_cpu_s(), time.perf_counter()
                summary(source(), F)
                times[name].append(time.perf_counter() - start)
                cpus[name].append(tree_cpu_s() - cpu)
        spark.stop()
    median = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({
        "bench": "spark_read", "decoder": "python" if arrow._columns is None else "compiled",
        "events": args.events, "partitions": args.partitions, "brokers": args.brokers,
        "minority": args.minority, "rounds": args.rounds,
        "tidings_s_median": round(median["tidings"], 3), "tidings_s_best": round(min(times["tidings"]), 3),
        "parquet_s_median": round(median["parquet"], 3), "parquet_s_best": round(min(times["parquet"]), 3),
        "tidings_rows_per_s": round(args.events / median["tidings"]),
        "parquet_rows_per_s": round(args.events / median["parquet"]),
        "ratio_median": round(median["tidings"] / median["parquet"], 2),
        "tidings_columns_s_median": round(median["columns"], 3),
        "columns_ratio_median": round(median["columns"] / median["parquet"], 2),
        "columns_cpu_s_median": round(statistics.median(cpus["columns"]), 2),
        "tidings_nothing_read_s_median": round(median["empty"], 3),
        "tidings_cpu_s_median": round(statistics.median(cpus["tidings"]), 2),
        "parquet_cpu_s_median": round(statistics.median(cpus["parquet"]), 2),
        "cpu_ratio_median": round(statistics.median(cpus["tidings"]) / statistics.median(cpus["parquet"]), 2),
        "land_as_parquet_s": round(land_s, 2), "load_average": os.getloadavg()[0],
    }))


if __name__ == "__main__":
    main()
