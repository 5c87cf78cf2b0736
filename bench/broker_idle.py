#!/usr/bin/env python3
"""When a tidings broker waits in bench/run.py's throughput tests, and for whom (perf sched).

  python bench/broker_idle.py [--tests a] [--rounds 1] [--delay-s 0.5] [--span-s 1.5] [--duration-s 5]
                              [--count 20000000]

Each test gets a fresh broker, started and loaded exactly as bench/run.py does (its start_server
and run_load: the broker on CPU 0, the load processes on CPU 1). While the load runs, `perf record`
takes the scheduler's switches and wake-ups of the whole machine for `--span-s` seconds (after
`--delay-s`), and the broker's threads are followed through them. The broker is *asleep* while
every one of its threads that worked in the span is off the CPU and not runnable: its event loop
in epoll, its log threads waiting for work (S) or for the disk (D). Each asleep stretch is counted
under what it was (a log thread in D: the disk; all in S: nothing to do) and what ended it: the
publisher's or the subscriber's write (the loop woken by a load process), a log thread's report
(the loop woken by the broker's own thread), the disk (a log thread woken by the kernel's I/O
completion), or anything else (a timer, a softirq run in another task's context: "other").

Asleep while a load process is what wakes it means the closed loop's window was with the clients
(the publisher waiting for deliveries to be counted); asleep in D means every event the window
allows was waiting for an fsync. Neither is the broker's CPU: on a quiet machine the broker's CPU
share plus its asleep share is about 100 %, and what is left is time the broker was runnable but
another task had CPU 0. Needs root (perf's sched tracepoints). Prints one JSON line per run and a
table; compare two commits with one run each, alternated, on the same machine. The recording must
end before the load does (a stretch after the last event counts as asleep): the load's event
limit is raised (`--count`, 20M: run.py's (a) stops at 3M, 2 s at 1.5M events/s), so it publishes
for `--duration-s`, and the defaults record from 0.5 s to 2 s after its workers start.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import broker_threads  # noqa: E402  (the broker's threads' CPU, from /proc)
import run  # noqa: E402  (bench/run.py: the broker and load exactly as the bench runs them)

LINE = re.compile(r"^\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s+(.*)$")
SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=.* next_pid=(\d+)")
WAKEUP = re.compile(r"comm=.* pid=(\d+) prio")


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, oldest first."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if int(fields[1]) == pid:
                found.append((int(fields[19]), int(entry)))  # (start time, pid)
    return [p for _, p in sorted(found)]


def record(server_pid: int, delay_s: float, span_s: float, data: str, seen: dict[str, Any]) -> None:
    """In a thread beside the load: once its workers are forked, wait, note the load processes and
    the broker's threads, record."""
    until = time.monotonic() + 30
    loads: list[int] = []
    while time.monotonic() < until and not any(len(children(p)) >= 2 for p in loads):
        time.sleep(0.01)
        loads = [p for p in children(os.getpid()) if p != server_pid]
    time.sleep(delay_s)  # (the workers connect, then wait 0.2 s before the first event)
    seen["clients"] = dict.fromkeys(loads, "client")
    for parent in loads:  # loads.py's workers: the subscribers first, the publisher last
        workers = children(parent)
        for i, p in enumerate(workers):
            seen["clients"][p] = "publisher" if i == len(workers) - 1 else "subscriber"
    before = broker_threads.threads(server_pid)
    subprocess.run(["perf", "record", "-q", "-e", "sched:sched_switch", "-e", "sched:sched_wakeup", "-a",
                    "-o", data, "--", "sleep", str(span_s)], check=True, capture_output=True)
    after = broker_threads.threads(server_pid)
    seen["working"] = [tid for tid, now in after.items()
                       if tid == server_pid or now[:2] != before.get(tid, (0, 0, 0, 0))[:2]]


def attribute(data: str, loop: int, working: list[int], clients: dict[int, str]) -> dict[str, Any]:
    """The broker's asleep stretches in the recording, by kind and by what ended them."""
    text = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,cpu,time,event,trace"],
                          capture_output=True, text=True, check=True).stdout
    return asleep_in(text, loop, working, clients)


def asleep_in(text: str, loop: int, working: list[int], clients: dict[int, str]) -> dict[str, Any]:
    """`attribute` on perf script's lines (comm, pid/tid, cpu, time, event, trace)."""
    state = dict.fromkeys(working, "R")  # R: running or runnable; S, D: asleep
    role = {tid: ("loop" if tid == loop else "log thread") for tid in working}
    asleep_ms: collections.Counter[str] = collections.Counter()
    stretches: collections.Counter[str] = collections.Counter()
    began = first = last = None
    kind = ""
    for line in text.splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        _, _, tid, _, at, event, rest = m.groups()
        t = float(at)
        first = t if first is None else first
        last = t
        woke = None
        if event == "sched_switch":
            s = SWITCH.search(rest)
            if s is not None and int(s.group(1)) in state:
                state[int(s.group(1))] = "R" if s.group(2).startswith("R") else s.group(2)[0]
        elif event == "sched_wakeup":
            w = WAKEUP.search(rest)
            target = int(w.group(1)) if w is not None else 0
            if target in state and state[target] != "R":
                state[target] = "R"
                waker = int(tid)
                woke = (role[target], role.get(waker) or clients.get(waker) or "other")
        asleep = all(v != "R" for v in state.values())
        if asleep and began is None:
            began, kind = t, ("a log thread in D (the disk)" if "D" in state.values() else "all in S")
        elif not asleep and began is not None:
            ended = f"{woke[0]} woken by {woke[1]}" if woke else "?"
            asleep_ms[f"{kind}; ended: {ended}"] += (t - began) * 1000
            stretches[f"{kind}; ended: {ended}"] += 1
            began = None
    span_ms = ((last or 0.0) - (first or 0.0)) * 1000
    return {"span_ms": round(span_ms, 1), "asleep_pct": round(100 * sum(asleep_ms.values()) / max(span_ms, 1e-9), 1),
            "asleep": {k: {"pct": round(100 * v / max(span_ms, 1e-9), 1), "stretches": stretches[k],
                           "mean_us": round(1000 * v / stretches[k])}
                       for k, v in asleep_ms.most_common()}}


def measure(test: str, round_no: int, args: argparse.Namespace) -> dict[str, Any]:
    server = run.start_server("tidings", round_no)
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="broker-idle-") as tmp:
        data = os.path.join(tmp, "sched.data")
        try:
            time.sleep(broker_threads.SETTLE_S)
            recorder = threading.Thread(target=record, args=(server.pid, args.delay_s, args.span_s, data, seen))
            recorder.start()
            result = run.run_load(server, "tidings", test, ["--duration-s", str(args.duration_s),
                                                             "--count", str(args.count)])
            recorder.join()
        finally:
            run.stop_server(server)
        found = attribute(data, server.pid, seen.get("working", [server.pid]), seen.get("clients", {}))
    return {"test": f"idle-{test}", "round": round_no, "value": result.get("value"), "unit": result.get("unit"),
            "server_cpu_pct": result.get("server_cpu_pct"), "client_cpu_pct": result.get("client_cpu_pct"),
            "foreign_cpu_pct": result.get("foreign_cpu_pct"), "loadavg_1m": round(os.getloadavg()[0], 2),
            "errors": result.get("errors", []), **found}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tests", default="a", help="from a,b,c")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--delay-s", type=float, default=0.5, help="after the load's workers start, before recording")
    ap.add_argument("--span-s", type=float, default=1.5, help="how long to record (inside the load's time)")
    ap.add_argument("--duration-s", type=float, default=5.0, help="the load's publishing time")
    ap.add_argument("--count", type=int, default=20_000_000,
                    help="the load's event limit (run.py's are 3M and 1M: a fast broker ends before the recording)")
    args = ap.parse_args()
    for round_no in range(1, args.rounds + 1):
        for test in args.tests.split(","):
            line = measure(test, round_no, args)
            print(json.dumps(line), flush=True)
            print(f"{line['test']} r{round_no}: {line['value']:,} {line['unit']}, broker CPU "
                  f"{line['server_cpu_pct']} %, asleep {line['asleep_pct']} % of {line['span_ms']:.0f} ms",
                  file=sys.stderr)
            for what, figures in line["asleep"].items():
                print(f"  {figures['pct']:5.1f} %  {figures['stretches']:5d} x {figures['mean_us']:6d} us  {what}",
                      file=sys.stderr)


if __name__ == "__main__":
    main()
