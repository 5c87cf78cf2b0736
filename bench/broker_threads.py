#!/usr/bin/env python3
"""Where a tidings broker's CPU goes, by thread, in bench/run.py's durable and latency tests.

  python bench/broker_threads.py [--tests c,d-best] [--rounds 2] [--modes plain,loop]
                                 [--duration-s 3] [--latency-count 5500]

Each test gets a fresh broker, started and loaded exactly as bench/run.py does (its start_server
and run_load: the broker on CPU 0, the load process on CPU 1, one mode after the other within a
round). The broker's threads are read from /proc/PID/task before and after the load: user and
system CPU and voluntary and involuntary context switches, per event the load sent. The event
loop runs in the main thread (its TID is the PID); every other thread is summed as `others`,
which in these tests is the log writer (the readers, the PFS worker and uvloop's pool are idle in
them: each line's `others_busy` counts the other threads that used any CPU). On a shared machine
the per-event figures follow the code more than wall-clock rates do, but wake-ups cost more CPU on
a busy machine too: compare modes within one run. Prints one JSON line per run (with the
one-minute load average at its start) and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import run  # noqa: E402  (bench/run.py: the broker and load exactly as the bench runs them)

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
SETTLE_S = 1.0  # after the port opens, before the first reading: startup's own CPU left out


def threads(pid: int) -> dict[int, tuple[int, int, int, int]]:
    """Per thread of `pid`: user and system CPU in clock ticks, voluntary and involuntary switches."""
    found: dict[int, tuple[int, int, int, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        found[int(tid)] = (int(fields[11]), int(fields[12]), int(status["voluntary_ctxt_switches"]),
                           int(status["nonvoluntary_ctxt_switches"]))
    return found


def per_event(pid: int, before: dict[int, tuple[int, int, int, int]], after: dict[int, tuple[int, int, int, int]],
              events: int) -> dict[str, Any]:
    """The main thread's and the others' CPU (us) and switches, per event."""
    sums = {"loop": [0, 0, 0, 0], "others": [0, 0, 0, 0]}
    for tid, now in after.items():
        was = before.get(tid, (0, 0, 0, 0))
        into = sums["loop" if tid == pid else "others"]
        for i in range(4):
            into[i] += now[i] - was[i]
    us = 1e6 / CLOCK_TICKS_PER_S / max(events, 1)
    busy = sum(1 for tid, now in after.items()
               if tid != pid and now[:2] != before.get(tid, (0, 0, 0, 0))[:2])
    return {"others_busy": busy, **{name: {"user_us": round(v[0] * us, 2), "sys_us": round(v[1] * us, 2),
                   "cpu_us": round((v[0] + v[1]) * us, 2), "vcs": round(v[2] / max(events, 1), 3),
                   "ivcs": round(v[3] / max(events, 1), 3)} for name, v in sums.items()}}


def measure(test: str, mode: str, round_no: int, extra: list[str]) -> dict[str, Any]:
    server = run.start_server("tidings", round_no, mode)
    try:
        time.sleep(SETTLE_S)
        load = os.getloadavg()[0]
        before = threads(server.pid)
        result = run.run_load(server, "tidings", test, extra)
        after = threads(server.pid)
    finally:
        run.stop_server(server)
    events = int(result.get("sent") or 0)
    line = {"test": f"threads-{test}", "mode": mode, "round": round_no, "events": events,
            "value": result.get("value"), "unit": result.get("unit"), "loadavg_1m": round(load, 2),
            "foreign_cpu_pct": result.get("foreign_cpu_pct"), "errors": result.get("errors", [])}
    line.update(per_event(server.pid, before, after, events))
    return line


def table(lines: list[dict[str, Any]]) -> str:
    rows = ["| test | mode | runs | value (median) | loop CPU us/event (user+sys) | others CPU us/event | "
            "loop switches/event (vol+invol) | others switches/event |", "|---|---|---|---|---|---|---|---|"]
    modes = [ln["mode"] for ln in lines]
    keys = sorted({(ln["test"], ln["mode"]) for ln in lines}, key=lambda k: (k[0], modes.index(k[1])))
    for test, mode in keys:
        group = [ln for ln in lines if ln["test"] == test and ln["mode"] == mode and not ln["errors"]]
        if not group:
            continue

        def span(thread: str, key: str, group: list[dict[str, Any]] = group) -> str:
            values = sorted(ln[thread][key] for ln in group)
            return f"{values[0]:g}" if len(values) == 1 else f"{values[0]:g}-{values[-1]:g}"

        value = statistics.median(ln["value"] or 0 for ln in group)
        rows.append(f"| {test} | {mode} | {len(group)} | {value:,.0f} {group[0]['unit']} | "
                    f"{span('loop', 'cpu_us')} ({span('loop', 'user_us')}+{span('loop', 'sys_us')}) | "
                    f"{span('others', 'cpu_us')} ({span('others', 'user_us')}+{span('others', 'sys_us')}) | "
                    f"{span('loop', 'vcs')}+{span('loop', 'ivcs')} | "
                    f"{span('others', 'vcs')}+{span('others', 'ivcs')} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tests", default="c,d-best", help="from a,b,c,d-best,d-durable")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="plain",
                    help=f"tidings modes of bench/run.py, from {','.join(run.TIDINGS_MODES)}")
    ap.add_argument("--duration-s", type=float, default=3.0, help="throughput tests: publishing time")
    ap.add_argument("--latency-count", type=int, default=5500, help="latency tests: events sent at 1,000/s")
    args = ap.parse_args()
    tests, modes = args.tests.split(","), args.modes.split(",")
    if set(modes) - set(run.TIDINGS_MODES):
        raise SystemExit(f"--modes: choose from {', '.join(run.TIDINGS_MODES)}")
    lines = []
    for round_no in range(1, args.rounds + 1):
        for test in tests:
            extra = (["--latency-count", str(args.latency_count)] if test.startswith("d")
                     else ["--duration-s", str(args.duration_s)])
            for mode in modes if round_no % 2 else modes[::-1]:
                line = measure(test, mode, round_no, extra)
                lines.append(line)
                print(json.dumps(line), flush=True)
    print(table(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
