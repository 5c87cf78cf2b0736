"""Micro benchmark of the pubend's event log: appends of 100-byte records in batches of 1, 10, 100
and 1000 with one sync per batch, then catch-up reads; prints one JSON line.

    python bench/bench_log.py [--dir DIR] [--seconds S] [--repeat N]

DIR should be on the disk the broker will use (fsync cost is the whole story for small batches);
the default is a temporary directory under the current one. Each batch size runs N times for S
seconds and the median run is reported, since fsync latency on shared machines varies a lot.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import tempfile
import time

from tidings.storage import EventLog

RECORD_BYTES = 100
BATCHES = (1, 10, 100, 1000)


def bench_appends(directory: pathlib.Path, per_batch: int, seconds: float) -> dict[str, float]:
    payload = bytes(range(RECORD_BYTES))
    with EventLog.open(directory) as log:
        tick = log.last_tick + 1
        records = syncs = 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            log.append([(tick + i, payload) for i in range(per_batch)])
            log.sync()
            tick += per_batch
            records += per_batch
            syncs += 1
        elapsed = time.perf_counter() - start
    return {"batch": per_batch, "records_per_s": round(records / elapsed), "syncs_per_s": round(syncs / elapsed),
            "mb_per_s": round(records * RECORD_BYTES / elapsed / 1e6, 2)}


def bench_reads(directory: pathlib.Path, read_bytes_max: int) -> dict[str, float]:
    with EventLog.open(directory) as log:
        start = time.perf_counter()
        after, records = 0, 0
        while True:
            got = log.read(after, read_bytes_max)
            if not got:
                break
            records += len(got)
            after = got[-1][0]
        elapsed = time.perf_counter() - start
        open_start = time.perf_counter()
    EventLog.open(directory).close()
    return {"read_bytes_max": read_bytes_max, "records_per_s": round(records / elapsed),
            "records": records, "reopen_s": round(time.perf_counter() - open_start, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=pathlib.Path, default=None)
    parser.add_argument("--seconds", type=float, default=1.0, help="per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per batch size (the median is reported)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir or pathlib.Path.cwd(), prefix="bench-log-") as name:
        root = pathlib.Path(name)
        appends = []
        for n in BATCHES:
            runs = [bench_appends(root / f"b{n}", n, args.seconds) for _ in range(args.repeat)]
            median = statistics.median_low(r["records_per_s"] for r in runs)
            appends.append(next(r for r in runs if r["records_per_s"] == median))
        reads = bench_reads(root / f"b{BATCHES[-1]}", 1 << 20)
    print(json.dumps({"bench": "event_log", "record_bytes": RECORD_BYTES, "python": platform.python_version(),
                      "appends": appends, "reads": reads}))


if __name__ == "__main__":
    main()
