#!/usr/bin/env python3
"""Where a tidings broker's CPU goes in each test of bench/run.py: py-spy over the broker while the
test's load runs, folded into tables.

  python bench/profile.py [--tests a,b,c,d-best,d-durable] [--broker tidings|tidings-mqtt]
                          [--rate 250] [--out FILE]

Each test gets a fresh broker, started and loaded exactly as bench/run.py does (broker on CPU 0,
the load process on CPU 1). py-spy (from bench/setup.sh's venv) samples every thread of the broker
at --rate per second, without idle stacks, from before the load starts until it ends; its raw
stacks are kept in $TIDINGS_BENCH_DIR/profiles/. The tables attribute each sample three ways:

  * thread: by name (MainThread runs the event loop; tidings-log-writer, tidings-pfs, ...), working
    or waiting (a wait primitive on top of the stack: the other tables leave those samples out);
  * where: the innermost frame inside src/tidings (module:function), i.e. the tidings code that is
    running or that called the library or system call on top of it;
  * leaf: the frame on top of the stack (a tidings function, msgpack, a socket or file call).

Each test's tables are printed as markdown, and one JSON line per test (its top rows and the
load's own result line) is appended to --out (default bench/results/profile.jsonl).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402

PY_SPY = os.path.join(run.PEERS_VENV, "bin", "py-spy")
TOP = 12
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^:()]*)(?::(?P<line>\d+))?\)$")


def parse_frame(frame: str) -> tuple[str, str]:
    """(function, file) of one frame of py-spy's raw output, e.g. `feed (tidings/aio/server.py:88)`."""
    m = FRAME.match(frame.strip())
    return (m["func"], m["file"]) if m else (frame.strip(), "")


def tidings_module(path: str) -> str | None:
    """`core.broker.broker` for .../src/tidings/core/broker/broker.py; None outside the package."""
    at = path.rfind("tidings/")
    return path[at + len("tidings/"):].removesuffix(".py").replace("/", ".") if at >= 0 else None


WAITS = ("epoll_wait", "epoll_pwait", "poll", "select", "pthread_cond_wait", "pthread_cond_timedwait",
         "sem_wait", "sem_timedwait", "sem_clockwait", "futex", "__futex", "do_futex_wait")


def waiting(func: str, file: str) -> bool:
    """A thread blocked, not working: a wait primitive on top, or an unresolved libc address (py-spy
    cannot name the syscall stubs futex and epoll waits sit in)."""
    return func.startswith(WAITS) or (func.startswith("0x") and file.startswith("libc"))


def fold(raw_path: str) -> dict[str, Any]:
    """The samples of a raw py-spy file (`--threads --native`) counted by thread (working or
    waiting), and the working ones by innermost tidings frame and by leaf."""
    threads: Counter[str] = Counter()
    where: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = busy = 0
    with open(raw_path) as f:
        for line in f:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            root, *rest = stack.split(";")
            frames = [parse_frame(fr) for fr in rest]
            total += count
            name = root.rpartition(":")[2].strip() or root  # `thread (20677): MainThread`
            func, file = frames[-1] if frames else ("?", "")
            if waiting(func, file):
                threads[f"{name} (waiting)"] += count
                continue
            busy += count
            threads[name] += count
            where[next((f"{tidings_module(fl)}:{fn}" for fn, fl in reversed(frames) if tidings_module(fl)),
                       "(outside tidings)")] += count
            module = tidings_module(file)
            leaf[f"{module}:{func}" if module else f"{func} ({os.path.basename(file) or 'native'})"] += count
    return {"samples": total, "busy": busy, "threads": threads, "where": where, "leaf": leaf}


def table(title: str, counts: Counter[str], total: int) -> str:
    rows = [f"| {title} | share |", "|---|---|"]
    rows += [f"| `{name}` | {100 * n / total:.1f} % |" for name, n in counts.most_common(TOP)]
    return "\n".join(rows)


def profile_test(broker: str, test: str, rate: int, round_no: int) -> dict[str, Any]:
    proto, _ = run.BROKERS[broker]
    server = run.start_server(broker, round_no)
    raw = os.path.join(run.WORK, "profiles", f"{broker}-{test}-{time.strftime('%Y%m%dT%H%M%S')}.txt")
    os.makedirs(os.path.dirname(raw), exist_ok=True)
    try:
        run.wait_for_quiet(server.pid)
        spy = subprocess.Popen([PY_SPY, "record", "--pid", str(server.pid), "--rate", str(rate), "--format", "raw",
                                "--threads", "--native", "--output", raw],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # the load connects and warms up before its measured span, time enough for py-spy to attach
        result = run.run_load(server, proto, test, [])
        spy.send_signal(signal.SIGINT)
        _, err = spy.communicate(timeout=60)
        if not os.path.exists(raw):
            raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace')[-400:]}")
    finally:
        run.stop_server(server)
    folded = fold(raw)
    return {"broker": broker, "test": test, "raw": raw, "load": result, **folded}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tests", default="a,b,c,d-best,d-durable")
    ap.add_argument("--broker", default="tidings", choices=["tidings", "tidings-mqtt"])
    ap.add_argument("--rate", type=int, default=250, help="samples per second")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "profile.jsonl"))
    args = ap.parse_args()
    if not os.path.exists(PY_SPY):
        sys.exit(f"no {PY_SPY}: run bench/setup.sh as root")
    missing = run.missing_prerequisite(args.broker)
    if missing:
        sys.exit(missing)
    os.sched_setaffinity(0, {int(run.CLIENT_CPU)})
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for test in args.tests.split(","):
        found = profile_test(args.broker, test, args.rate, 1)
        total, busy = found["samples"] or 1, found["busy"] or 1
        load = found["load"]
        print(f"\n### {args.broker} ({test}): {found['samples']} samples at {args.rate}/s, {found['busy']} working; "
              f"load: {load.get('value')} {load.get('unit', '')}, broker CPU {load.get('server_cpu_pct')} %\n")
        print(table("thread (share of all samples)", found["threads"], total) + "\n")
        for title in ("where", "leaf"):
            print(table(f"{title} (share of working samples)", found[title], busy) + "\n")
        line = {"run_id": stamp, "tidings": run.tidings_fingerprint(), "broker": args.broker, "test": test,
                "rate": args.rate, "samples": found["samples"], "busy": found["busy"], "raw": found["raw"],
                "load": load, "threads": [[n, round(c / total, 4)] for n, c in found["threads"].most_common(TOP)],
                **{k: [[n, round(c / busy, 4)] for n, c in found[k].most_common(TOP)] for k in ("where", "leaf")}}
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
