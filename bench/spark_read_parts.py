"""Where the time of the Spark batch read goes: the aggregation of bench/spark_read_bench.py over
the tidings read, over the same Arrow batches served again from the Python workers' memory (Spark's
own cost for these rows, with no broker and no decoding), over Parquet, and over a read of nothing
(the fixed cost of a query), in one run.

    .venv/bin/python bench/spark_read_parts.py [--events 200000] [--rounds 5] [--partitions 2]

Per query: wall time, CPU seconds of every process of the run (the broker, the JVM, the Python
workers) and of the broker alone. Per task of the tidings read: its wall time, the time spent
waiting in the read (the broker's share and the socket), its decoding CPU (records_to_batch) and
its process's CPU. Prints one JSON line of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tidings.testing import BrokerProcess

sys.path.insert(0, str(Path(__file__).parent))
from bulk_read_parts import cpu_s
from spark_local import local_session
from spark_read_bench import publish, summary, tree_cpu_s
from spark_read_probes import TASKS_FILE, KeptSource, TimedSource

HERE = Path(__file__).parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    # the workers (started by the JVM, with this environment) import spark_read_probes from here
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import functions as F

    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "data") as broker:
        assert broker.proc is not None
        os.environ[TASKS_FILE] = str(Path(tmp) / "tasks.jsonl")
        publish(broker.address, args.events)
        spark = local_session(Path(__file__).stem)
        spark.dataSource.register(TimedSource)
        spark.dataSource.register(KeptSource)

        def read(fmt: str, **options: str):
            def load():
                reader = (spark.read.format(fmt).option("broker", broker.address).option("pattern", "nodes/+/load")
                          .option("partitions", str(args.partitions)))
                for key, value in options.items():
                    reader = reader.option(key, value)
                return reader.load()
            return load

        landed = str(Path(tmp) / "events.parquet")
        read("tidings")().write.parquet(landed)
        sources = {"tidings": read("tidings_timed"), "kept_batches": read("tidings_kept"),
                   "parquet": lambda: spark.read.parquet(landed), "nothing": read("tidings", startTick=str(2**62))}
        for _ in range(3):  # warm-up: every worker keeps its batches, the JVM compiles
            for source in sources.values():
                summary(source(), F)
        Path(os.environ[TASKS_FILE]).unlink(missing_ok=True)
        runs: dict[str, dict[str, list[float]]] = {name: {"s": [], "cpu_s": [], "broker_cpu_s": []} for name in sources}
        for _ in range(args.rounds):
            for name, source in sources.items():
                cpu, broker_cpu, start = tree_cpu_s(), cpu_s(broker.proc.pid), time.perf_counter()
                summary(source(), F)
                runs[name]["s"].append(time.perf_counter() - start)
                runs[name]["cpu_s"].append(tree_cpu_s() - cpu)
                runs[name]["broker_cpu_s"].append(cpu_s(broker.proc.pid) - broker_cpu)
        spark.stop()
        tasks = [json.loads(line) for line in Path(os.environ[TASKS_FILE]).read_text().splitlines()]
    out: dict[str, object] = {"bench": "spark_read_parts", "events": args.events, "rounds": args.rounds,
                              "partitions": args.partitions}
    for name, samples in runs.items():
        for key, values in samples.items():
            out[f"{name}_{key}_median"] = round(statistics.median(values), 3)
    busy = [t for t in tasks if t["rows"]]
    out["tasks_with_rows_per_query"] = round(len(busy) / args.rounds, 2)
    for key in ("rows", "task_s", "reading_s", "decode_cpu_s", "task_cpu_s"):
        out[f"task_{key}_median"] = round(statistics.median(t[key] for t in busy), 3)
    out["load_average"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
