"""The PFS microbenchmark of the Gryphon durable paper (section 5.1.2), against logging each event
per subscriber; prints one JSON line.

    python bench/pfs_bench.py [--dir DIR] [--seconds 100] [--rate 800] [--subscribers 100]
                              [--matches 200] [--event-bytes 418] [--keep 1000] [--seed 1]

The workload is the paper's, run as fast as possible instead of in real time: `rate` events per
second of workload for `seconds` seconds reach one subscriber's broker; each of `subscribers`
subscribers matches `matches` of them per second (each event matches a seeded random set of
subscribers of that size: 25 of 100 at the defaults). Both stores sync once per second of workload
(every `matches` events of a subscriber, as the paper) and keep about the last `keep` events of
each subscriber (5 seconds), chopping whole segments once a second.

- pfs: one `PfsStream` (this pubend's PFS), one record per event listing the matching subscribers
  with their back-pointers, one fsync per workload second, `chop` below the kept window.
- per-subscriber log: one `EventLog` per subscriber, each matching event's `event-bytes` bytes
  appended to every matching subscriber's log, each log fsynced once per workload second,
  `release_through` below its kept window.

Reported: bytes written (record headers included) and wall time of each, and the ratios. Matching
is not timed in either: both get the same precomputed matches. DIR should be on the broker's disk
(the default is a temporary directory under the current one).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import random
import tempfile
import time

from tidings.storage import EventLog
from tidings.storage.pfs import PfsStream
from tidings.storage.record import HEADER_BYTES

TICK_START = 1_700_000_000_000_000
SEGMENT_BYTES = 64 << 10


def workload(args: argparse.Namespace) -> list[tuple[int, list[int]]]:
    """(tick, matching subscribers) per event; ticks are microseconds at `rate` events/s."""
    rng = random.Random(args.seed)
    per_event = round(args.subscribers * args.matches / args.rate)
    step_us = 1_000_000 // args.rate
    population = range(args.subscribers)
    return [(TICK_START + i * step_us, sorted(rng.sample(population, per_event)))
            for i in range(args.rate * args.seconds)]


def keep_from(tick: int, args: argparse.Namespace) -> int:
    """The oldest tick of the kept window (about the last `keep` events of each subscriber)."""
    return tick - args.keep * 1_000_000 // args.matches


def run_pfs(directory: pathlib.Path, events: list[tuple[int, list[int]]], args: argparse.Namespace) -> dict[str, float]:
    stream = PfsStream.open(directory, segment_bytes_max=SEGMENT_BYTES)
    written = 0
    start = time.perf_counter()
    try:
        for i, (tick, subscribers) in enumerate(events, 1):
            before = stream.size_bytes
            stream.append(tick, subscribers)
            written += stream.size_bytes - before
            if i % args.rate == 0:
                stream.sync()
                stream.chop(keep_from(tick, args))
        stream.sync()
    finally:
        stream.close()
    return {"seconds": time.perf_counter() - start, "bytes": written, "syncs": len(events) // args.rate + 1}


def run_logs(directory: pathlib.Path, events: list[tuple[int, list[int]]],
             args: argparse.Namespace) -> dict[str, float]:
    payload = bytes(i % 251 for i in range(args.event_bytes))
    logs = [EventLog.open(directory / f"s{s}", segment_bytes_max=SEGMENT_BYTES) for s in range(args.subscribers)]
    written = syncs = 0
    start = time.perf_counter()
    try:
        for i, (tick, subscribers) in enumerate(events, 1):
            for s in subscribers:
                logs[s].append([(tick, payload)])
            written += len(subscribers) * (HEADER_BYTES + args.event_bytes)
            if i % args.rate == 0:
                for log in logs:
                    log.sync()
                    log.release_through(keep_from(tick, args))
                syncs += len(logs)
        for log in logs:
            log.sync()
    finally:
        for log in logs:
            log.close()
    return {"seconds": time.perf_counter() - start, "bytes": written, "syncs": syncs + len(logs)}


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=pathlib.Path, default=None)
    parser.add_argument("--seconds", type=int, default=100, help="seconds of workload")
    parser.add_argument("--rate", type=int, default=800, help="events per second of workload")
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--matches", type=int, default=200, help="events per second each subscriber matches")
    parser.add_argument("--event-bytes", type=int, default=418)
    parser.add_argument("--keep", type=int, default=1000, help="events kept per subscriber")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    assert 0 < args.matches <= args.rate and args.rate <= 1_000_000
    events = workload(args)
    with tempfile.TemporaryDirectory(prefix="pfs-bench-", dir=args.dir or pathlib.Path.cwd()) as tmp:
        pfs = run_pfs(pathlib.Path(tmp) / "pfs", events, args)
        logs = run_logs(pathlib.Path(tmp) / "logs", events, args)
    result: dict[str, object] = {
        "bench": "pfs", "events": len(events), "subscribers": args.subscribers,
        "matches_per_event": len(events[0][1]), "event_bytes": args.event_bytes, "workload_s": args.seconds,
        "pfs_s": round(pfs["seconds"], 3), "pfs_bytes": pfs["bytes"], "pfs_syncs": pfs["syncs"],
        "logs_s": round(logs["seconds"], 3), "logs_bytes": logs["bytes"], "logs_syncs": logs["syncs"],
        "bytes_ratio": round(logs["bytes"] / pfs["bytes"], 1),
        "time_ratio": round(logs["seconds"] / pfs["seconds"], 1),
        "python": platform.python_version(),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
