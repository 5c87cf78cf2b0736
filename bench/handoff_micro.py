#!/usr/bin/env python3
"""The log writer's hand-off alone: event loop -> writer thread -> event loop, without the disk.

  python bench/handoff_micro.py [--rounds 5] [--turns 1000] [--rate 1000] [--work-us 30] [--cpu 0]
                                [--switch-intervals-s 0.0005,0.005,0.0001] [--modes writer,here]
                                [--disk DIR]

One process, pinned to one CPU as the bench pins the broker. At `rate` turns a second the event
loop does what a PUBLISH's turn does to the writer (aio/storage_worker.py): an Append and a Sync,
then `work_us` of other Python work (the rest of the turn: the driver's other effects, settled,
the timer), and measures the time until the loop runs the writer's sync report (WriteSynced's
callback). The log is a stand-in whose fsync returns at once, so what is measured is the hand-off
itself: the wake-ups, the GIL passing between the two threads, the queue, and nothing of the disk
or the core. Each GIL switch interval given (the broker sets 0.5 ms, CPython's default is 5 ms) is
run in turn, round by round. Prints one JSON line per interval: medians over the rounds of the
round trip's p50/p90/p99 in microseconds, the process's CPU time per turn (steadier than the wall
clock on a shared machine) and its context switches per turn.

`--modes`: `writer` hands every commit to the writer thread (the worker without `on_synced_here`,
as under load, or with TIDINGS_SYNC_IN_LOOP=0); `here` lets the quiet worker commit in the loop's
thread (the broker's default); several given, they alternate round by round, a line for each.

`--disk DIR`: a real EventLog in a fresh directory under DIR instead of the stand-in, its fsync
timed at each call; each turn's round trip less its own fsync (`over_fsync_*`) is then what the
hand-off added to the disk, steadier than the round trip itself when the disk's latency wanders
(a shared machine), since both sides of the subtraction come from the same turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import resource
import shutil
import sys
import tempfile
import time
from typing import Any

sys.dont_write_bytecode = True
SWITCH_INTERVALS_S = "0.0005,0.005,0.0001"  # the broker's (aio/server.py), CPython's default, shorter


class InstantLog:
    """What StorageWorker and log_state use of an EventLog, with no disk: the fsync returns at once."""

    def __init__(self) -> None:
        self.last_tick = self.first_tick = self.released_through = 0
        self.size_bytes = self.record_count = 0

    def append(self, records: list[tuple[int, bytes]], keys: list[bytes] | None = None) -> None:
        self.last_tick = records[-1][0]
        self.record_count += len(records)
        self.size_bytes += sum(len(b) for _, b in records)

    def sync(self) -> None:
        pass

    def prefill_due(self) -> bool:
        return False

    def prefill(self) -> int:
        return 0

    def tick_marks(self, runs: int) -> tuple[int, ...]:
        return ()


def spin_us(us: float) -> None:
    end = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < end:
        pass


class TimedLog:
    """A real EventLog whose fsyncs are timed: the last one's length, for the turn it served."""

    def __init__(self, directory: str) -> None:
        from tidings.storage import EventLog

        self.directory = tempfile.mkdtemp(prefix="handoff-", dir=directory)
        self.log = EventLog.open(pathlib.Path(self.directory) / "log")
        self.last_sync_us = 0.0
        self.syncs_us: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)

    def sync(self) -> None:
        began = time.perf_counter_ns()
        self.log.sync()
        self.last_sync_us = (time.perf_counter_ns() - began) / 1000
        self.syncs_us.append(self.last_sync_us)

    def close(self) -> None:
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)


async def one_round(turns: int, rate: float, work_us: float, mode: str = "writer",
                    disk: str | None = None) -> dict[str, Any]:
    from tidings.aio.storage_worker import StorageWorker

    loop = asyncio.get_running_loop()
    took: list[float] = []
    over: list[float] = []  # with a disk: each round trip less its own fsync
    started: dict[int, int] = {}
    done = loop.create_future()
    log: Any = InstantLog() if disk is None else TimedLog(disk)

    def synced(token: int, _state: object) -> None:
        now = time.perf_counter_ns()
        sync_us = getattr(log, "last_sync_us", 0.0)
        for t in [t for t in started if t <= token]:
            took.append((now - started.pop(t)) / 1000)
            over.append(took[-1] - sync_us)
        if len(took) >= turns and not done.done():
            done.set_result(None)

    worker = StorageWorker(log, lambda token, st: loop.call_soon_threadsafe(synced, token, st),
                           lambda st: None, lambda exc: None,
                           on_synced_here=synced if mode == "here" else None)
    worker.start()
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    payload = b"x" * 140
    interval_s = 1 / rate

    def turn(token: int) -> None:
        started[token] = time.perf_counter_ns()
        worker.append([(token, payload)])
        worker.sync(token)
        spin_us(work_us)
        if token < turns:
            loop.call_later(interval_s, turn, token + 1)

    loop.call_soon(turn, 1)
    await asyncio.wait_for(done, turns * interval_s * 20 + 10)
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    worker.stop()
    if disk is not None:
        log.close()
    took.sort()
    over.sort()
    cpu_s = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    switches = (usage1.ru_nvcsw + usage1.ru_nivcsw) - (usage0.ru_nvcsw + usage0.ru_nivcsw)
    out = {"p50_us": took[len(took) // 2], "p90_us": took[int(len(took) * 0.9)],
           "p99_us": took[int(len(took) * 0.99)], "cpu_us_per_turn": 1e6 * cpu_s / turns,
           "switches_per_turn": switches / turns}
    if disk is not None:
        fsyncs = sorted(log.syncs_us) or [0.0]
        out.update({"over_fsync_p50_us": over[len(over) // 2], "over_fsync_p90_us": over[int(len(over) * 0.9)],
                    "over_fsync_p99_us": over[int(len(over) * 0.99)], "fsync_p50_us": fsyncs[len(fsyncs) // 2],
                    "fsync_p90_us": fsyncs[int(len(fsyncs) * 0.9)], "fsyncs_per_turn": worker.syncs / turns})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--work-us", type=float, default=30.0)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--switch-intervals-s", default=SWITCH_INTERVALS_S)
    ap.add_argument("--modes", default="writer", help="writer, here, or both: alternated")
    ap.add_argument("--disk", help="a real log in a directory made here (its fsyncs timed) instead of none")
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    from tidings.aio.loop import new_event_loop

    intervals = [float(x) for x in args.switch_intervals_s.split(",")]
    modes = args.modes.split(",")
    if not set(modes) <= {"writer", "here"}:
        ap.error(f"--modes: writer and/or here, not {args.modes}")
    results: dict[tuple[float, str], list[dict[str, Any]]] = {(i, m): [] for i in intervals for m in modes}
    for n in range(args.rounds):
        for interval in intervals:
            sys.setswitchinterval(interval)
            for mode in modes if n % 2 == 0 else modes[::-1]:
                with asyncio.Runner(loop_factory=new_event_loop) as runner:
                    results[interval, mode].append(
                        runner.run(one_round(args.turns, args.rate, args.work_us, mode, args.disk)))
    for (interval, mode), rounds in results.items():
        med = {k: round(sorted(r[k] for r in rounds)[len(rounds) // 2], 2) for k in rounds[0]}
        print(json.dumps({"switch_interval_s": interval, "mode": mode, "rounds": len(rounds), "turns": args.turns,
                          "work_us": args.work_us, **med,
                          "p50_us_each": [round(r["p50_us"], 1) for r in rounds]}), flush=True)


if __name__ == "__main__":
    main()
