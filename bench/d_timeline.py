"""Where a (d) event's time goes inside a broker, read from the system calls of the thread that
makes it durable.

    python bench/d_timeline.py [--brokers tidings,floor-prefilled] [--test d-best] [--count 3000]

Each broker is started as bench/run.py starts it (pinned to CPU 0, a fresh data directory) and
given the (d) latency load of loads.py from CPU 1, while `perf record` takes every system call's
entry and exit of the broker's threads. The event loop that fsyncs most (a thread that waits in
epoll) is the one read, and its calls are cut into one timeline per event:

    wake          the return of the epoll wait before the event's log write
    log write     the first write or pwrite to a file descriptor the thread fsyncs
    writeback     sync_file_range on it, if the broker begins the disk's write early (tidings)
    sync          the fsync or fdatasync of that file descriptor
    first send    the first write to any other file descriptor after the sync (a socket)

and the spans between them: wake to log write (the broker's own work before the disk has the
event), log write to sync (its work while the disk writes), the sync, sync to first send (its
work after), and wake to first send. An event committed by another thread (tidings' writer
thread takes the commits when fsyncs turn slow: `loop_syncs` in the line counts the loop's) or
read at the same wake as another is not timed; the table says how many were. The medians and
p90s of each, per broker, side by side: the C yardstick of bench/floor_broker.c
(`floor-prefilled`) does only what (d) needs, so the difference in each span is what the broker
adds there. The system calls are a broker's, not its
source, so the cut is the same for every broker that logs, fsyncs and then writes to a socket.

It needs Linux perf (`perf record` able to trace the broker: root, or perf_event_paranoid low
enough) on x86-64 (the system call numbers below). One JSON line per broker on stdout, after the
table. docs/benchmarks.md ("Stop 33") has a run's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402
from fsync_floor import percentile_us  # noqa: E402

# x86-64 system call numbers
WAITS = {232, 281, 441}  # epoll_wait, epoll_pwait, epoll_pwait2
WRITES = {1, 18, 20, 44, 46}  # write, pwrite64, writev, sendto, sendmsg
SYNCS = {74, 75}  # fsync, fdatasync
WRITEBACK = 277  # sync_file_range
EVENTS = "raw_syscalls:sys_enter,raw_syscalls:sys_exit"
SPANS = ("wake_to_log_write", "log_write", "writeback", "log_write_to_sync", "sync", "sync_to_first_send",
         "first_send", "wake_to_first_send")
LINE = re.compile(r"^\s*\S+\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit):\s+NR (\d+)(?: \((\w+))?")


@dataclass
class Call:
    nr: int
    fd: int | None
    enter: float  # µs
    exit: float


def calls_by_thread(lines: Any) -> dict[int, list[Call]]:
    """`perf script` lines of raw_syscalls enter/exit, as each thread's completed calls in order."""
    threads: dict[int, list[Call]] = defaultdict(list)
    open_calls: dict[int, tuple[int, int | None, float]] = {}
    for line in lines:
        m = LINE.match(line)
        if m is None:
            continue
        tid, at, kind, nr = int(m[1]), round(float(m[2]) * 1e6, 1), m[3], int(m[4])
        if kind == "enter":
            open_calls[tid] = (nr, int(m[5], 16) if m[5] else None, at)
        else:
            started = open_calls.pop(tid, None)
            if started is not None and started[0] == nr:
                threads[tid].append(Call(nr, started[1], started[2], at))
    return threads


def timelines(calls: list[Call]) -> list[dict[str, float]]:
    """The thread's calls cut into events (the module's doc): one dict of spans (µs) per event
    whose log write, sync and first send were all seen after a wake."""
    log_fds = {c.fd for c in calls if c.nr in SYNCS}
    out: list[dict[str, float]] = []
    wake: float | None = None  # the last wait's return
    began = 0.0  # the event's wake
    event: dict[str, Call] = {}  # its calls so far
    for c in calls:
        if c.nr in WAITS:
            if "sync" not in event:  # an event the thread waited in before its sync is not one of these
                event = {}
            wake = c.exit
        elif c.nr in WRITES and c.fd in log_fds:
            if not event and wake is not None:
                event, began = {"log_write": c}, wake
        elif not event:
            continue
        elif c.nr == WRITEBACK and c.fd in log_fds:
            event.setdefault("writeback", c)
        elif c.nr in SYNCS:
            event.setdefault("sync", c)
        elif c.nr in WRITES and "sync" in event:
            out.append(_spans(began, event["log_write"], event.get("writeback"), event["sync"], c))
            event, wake = {}, None
    return out


def _spans(wake: float, write: Call, writeback: Call | None, sync: Call, send: Call) -> dict[str, float]:
    spans = {"wake_to_log_write": write.enter - wake, "log_write": write.exit - write.enter,
             "log_write_to_sync": sync.enter - (writeback or write).exit, "sync": sync.exit - sync.enter,
             "sync_to_first_send": send.enter - sync.exit, "first_send": send.exit - send.enter,
             "wake_to_first_send": send.exit - wake}
    if writeback is not None:
        spans["writeback"] = writeback.exit - writeback.enter
    return spans


def summary(events: list[dict[str, float]]) -> dict[str, dict[str, float | None]]:
    """Each span's p50 and p90 over the events that have it, taken as loads.py takes its own."""
    out = {}
    for span in SPANS:
        values = sorted(e[span] for e in events if span in e)
        if values:
            out[span] = {"p50": percentile_us(values, 50), "p90": percentile_us(values, 90)}
    return out


def perf_missing() -> str | None:
    if platform.machine() != "x86_64":
        return f"the system call numbers here are x86-64's, not {platform.machine()}'s"
    if shutil.which("perf") is None:
        return "Linux perf is not installed (Debian: linux-perf)"
    with tempfile.TemporaryDirectory() as tmp:
        probe = subprocess.run(["perf", "record", "-q", "-o", os.path.join(tmp, "probe"), "-e", EVENTS, "--", "true"],
                               capture_output=True, text=True, check=False)
    return None if probe.returncode == 0 else f"perf cannot trace system calls here: {probe.stderr.strip()[-300:]}"


def measure(name: str, test: str, count: int, work: str) -> dict[str, Any]:
    """One broker: started, traced under the (d) load, stopped; its timelines summarised."""
    server = run.start_server(name, 0)
    trace = os.path.join(work, f"{name}.perf")
    try:
        run.wait_for_quiet(server.pid)
        perf = subprocess.Popen(["perf", "record", "-q", "-o", trace, "-e", EVENTS, "-p", str(server.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # perf attached to every thread before the first event
        try:
            load = run.run_load(server, run.BROKERS[name][0], test, ["--latency-count", str(count)])
        finally:
            perf.send_signal(signal.SIGINT)
            perf.wait(60)
    finally:
        run.stop_server(server)
    script = subprocess.Popen(["perf", "script", "-i", trace], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    assert script.stdout is not None
    threads = calls_by_thread(script.stdout)
    script.wait(120)
    os.unlink(trace)
    syncs = Counter({tid: sum(c.nr in SYNCS for c in calls) for tid, calls in threads.items()
                     if any(c.nr in WAITS for c in calls)})  # the event loops' fsyncs
    tid, loop_syncs = syncs.most_common(1)[0] if syncs else (0, 0)
    events = timelines(threads[tid]) if loop_syncs else []
    return {"broker": name, "test": test, "events": len(events), "sent": count, "loop_syncs": loop_syncs,
            "spans_us": summary(events),
            "client_p50_us": load.get("p50_us"), "client_p99_us": load.get("p99_us"), "errors": load.get("errors")}


def table(results: list[dict[str, Any]]) -> str:
    rows = [f"{'span (µs), p50 [p90]':28s}" + "".join(f"{r['broker']:>22s}" for r in results)]
    for span in SPANS:
        cells = []
        for r in results:
            s = r["spans_us"].get(span)
            cells.append(f"{s['p50']:>12.1f} [{s['p90']:>7.1f}]" if s else f"{'-':>22s}")
        rows.append(f"{span:28s}" + "".join(cells))
    rows.append(f"{'events timed / sent':28s}" + "".join(f"{r['events']:>14} / {r['sent']:<5}" for r in results))
    rows.append(f"{'client p50 (loads.py)':28s}" + "".join(f"{r['client_p50_us'] or '-':>22}" for r in results))
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="tidings,floor-prefilled", help="from bench/run.py's brokers")
    ap.add_argument("--test", default="d-best", choices=["d-best", "d-durable"])
    ap.add_argument("--count", type=int, default=3000, help="events sent to each broker (1,000/s)")
    ap.add_argument("--quiet-wait-s", type=float, default=run.SETTINGS["quiet_wait_s"],
                    help="at most this long to wait for a quiet machine before each broker's run (bench/run.py's)")
    args = ap.parse_args()
    run.SETTINGS["quiet_wait_s"] = args.quiet_wait_s
    missing = perf_missing()
    if missing:
        raise SystemExit(f"d_timeline: {missing}")
    names = [n.strip() for n in args.brokers.split(",") if n.strip()]
    for name in names:
        if name not in run.BROKERS:
            raise SystemExit(f"d_timeline: no broker {name!r} (bench/run.py has {', '.join(run.BROKERS)})")
        why = run.missing_prerequisite(name)
        if why:
            raise SystemExit(f"d_timeline: {name}: {why}")
    with tempfile.TemporaryDirectory(dir=run.WORK if os.path.isdir(run.WORK) else None) as work:
        results = []
        for name in names:
            print(f"d_timeline: {name}, {args.count} {args.test} events ...", file=sys.stderr, flush=True)
            results.append(measure(name, args.test, args.count, work))
    print(table(results))
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
