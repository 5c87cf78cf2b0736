"""Where the time of one Spark task's read goes, outside Spark: a bulk read (READ) of `--events`
events from a fresh broker process, decoded into Arrow record batches as a task does, answered
with the log's bytes (`spans`: SPAN frames the task checks and picks from, as a Spark task reads)
and with the matching records (`bulk`: RECORDS frames), against the plain bounded read of the same
events into `Event` objects (`events`).

    .venv/bin/python bench/bulk_read_parts.py [--events 100000] [--rounds 3] [--minority]

The events are those of bench/spark_read_bench.py (`nodes/host<i mod 100>/load`, a float `load`
attribute, a 100-byte payload). Per round and read: wall time, the client process's CPU (its event
loop thread included), the decoding thread's CPU in records_to_batch, and the broker process's CPU
(from /proc). Prints one JSON line with the medians. `--minority` adds twice as many events on
`nodes/host<i>/mem`, so the pattern keeps a third of the log (bench/spark_read_bench.py).
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

from tidings import sync
from tidings.spark.arrow import arrow_schema
from tidings.spark.reading import batch_of
from tidings.testing import BrokerProcess

sys.path.insert(0, str(Path(__file__).parent))
from spark_read_bench import publish


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


PATTERN = "nodes/+/load"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--minority", action="store_true", help="the pattern keeps one event in three")
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"spans": [], "bulk": [], "events": []}
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "data") as broker:
        assert broker.proc is not None
        pid = broker.proc.pid
        publish(broker.address, args.events, args.minority)
        with sync.connect(broker.address, service="bench", instance="parts", follow_advice=False) as client:
            end, pubend, schema = int(client.status()["last_tick"]), client.pubend or "", arrow_schema()
            for _ in range(args.rounds):
                for name in ("spans", "bulk"):
                    marks = (time.perf_counter(), time.process_time(), cpu_s(pid))
                    decode_s, rows, position = 0.0, 0, 0
                    for item in client.read_records(PATTERN, after=0, end=end, spans=name == "spans"):
                        started = time.thread_time()  # this thread's: the client's loop thread runs meanwhile
                        batch, position = batch_of(item, schema, pubend, PATTERN, position, end)
                        decode_s += time.thread_time() - started
                        rows += 0 if batch is None else batch.num_rows
                    assert rows == args.events, rows
                    runs[name].append(parts(marks, pid, decode_s))
                marks = (time.perf_counter(), time.process_time(), cpu_s(pid))
                assert sum(1 for _ in client.read(PATTERN, after=0, end=end)) == args.events
                runs["events"].append(parts(marks, pid, 0.0))
    out: dict[str, object] = {"bench": "bulk_read_parts", "events": args.events, "rounds": args.rounds,
                              "minority": args.minority}
    for name, samples in runs.items():
        for key in samples[0]:
            out[f"{name}_{key}_median"] = round(statistics.median(s[key] for s in samples), 3)
    out["load_average"] = os.getloadavg()[0]
    print(json.dumps(out))


def parts(marks: tuple[float, float, float], pid: int, decode_s: float) -> dict[str, float]:
    wall, cpu, broker = marks
    return {"wall_s": time.perf_counter() - wall, "client_cpu_s": time.process_time() - cpu,
            "decode_cpu_s": decode_s, "broker_cpu_s": cpu_s(pid) - broker}


if __name__ == "__main__":
    main()
