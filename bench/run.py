#!/usr/bin/env python3
"""The tidings benchmark: tidings and its peers on loopback, one command.

  python bench/run.py [--rounds N] [--brokers tidings,mosquitto,nats,amqtt] [--tests a,b,c,d,e]
                      [--tidings-modes plain,auth,auth+tls] [--out FILE]

For every round, each broker in turn is started alone with a fresh data directory on a free
127.0.0.1 port, pinned to CPU 0 (`taskset -c 0`); its tests run as separate load processes pinned to
CPU 1 (`taskset -c 1`, see loads.py); then it is stopped by its PID. The broker order rotates from
round to round so slow drifts in background load spread over all brokers. Before each test the
runner waits (at most 20 s) for the broker to go idle and notes how busy the machine was.

Tests: a (1->1 best effort), b (1->10 fan-out), c (durable publishing), d (latency at 1,000/s,
best effort and durable: two result lines), e (tidings filter matching, bench/bench_matching.py at
10,000 and 100,000 filters; run once per round). After a broker's tests a "mem" line records its
peak resident memory (VmHWM) over the tests of that round.

--tidings-modes runs tidings once per mode, each with a fresh broker: plain (as before), auth (the
broker reads an auth file with one identity, allowed to publish and subscribe on bench/#, and every
load connection authenticates with its credential: SCRAM, the client's scrypt once per connection,
before the measured span), tls (the broker serves TLS with a certificate from `tidings tls
dev-certs`; the loads check it against the CA) and auth+tls. The modes other than plain are
labelled tidings+auth, tidings+tls, tidings+auth+tls in the results. loop is plain with a quiet
broker's log commits made in its event loop's thread (TIDINGS_SYNC_IN_LOOP=1, aio/storage_worker.py:
the default), writer with every commit the log writer thread's (TIDINGS_SYNC_IN_LOOP=0); every other
mode runs the broker's default: `--tests d --tidings-modes writer,loop` is the A/B of the two in one run, the
brokers alternated within each round as the modes are.

The brokers "floor" and "floor-prefilled" (d only) are the yardstick of the d bars:
bench/floor_broker.c, built here with the machine's C compiler, a one-thread epoll loop that makes
each MQTT PUBLISH durable, then forwards it and acknowledges it, and does nothing else. "floor"
writes as the floor is measured (write + fsync), so its margin above the floor is the loopback
round trip that no broker can skip; "floor-prefilled" writes as tidings' log does (pwrite over
zeros + fdatasync). What is left of tidings' margin after theirs is tidings' own.

With d, each round first measures the disk's own fsync latency (bench/fsync_floor.py: append a small
record and fsync it, 3,000 times at 1,000/s, in $TIDINGS_BENCH_DIR/runs, the file system of the
brokers' data, on the brokers' CPU 0 where tidings' log writer waits for its fsyncs): a line with
broker "disk", test "fsync" and its p50/p90/p99. Every d line of the round carries that floor
(fsync_p50_us, fsync_p99_us) and its own figures above it (over_fsync_p50_us, over_fsync_p99_us):
tidings fsyncs every event before it delivers it, so the margin is what its path costs (issue
21's target: p50 at most +100 us, p99 at most +300 us). A d line also reports its stalls (slow
samples with the evidence of who did not run: bench/stalls.py), the broker's CPU per event and
its threads' context switches per event.

Each measurement is one JSON line appended to --out (default bench/results/results.jsonl);
`python bench/summarize.py FILE` turns the file into markdown tables.

Peers come from bench/setup.sh (run it once, as root). State (configs, data, logs, the peers'
venv) lives in $TIDINGS_BENCH_DIR, default /tmp/tidings-bench, never in the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import fsync_floor  # noqa: E402
import netutil  # noqa: E402

WORK = os.path.abspath(os.environ.get("TIDINGS_BENCH_DIR", "/tmp/tidings-bench"))
PEERS_VENV = os.path.join(WORK, "venv-peers")
SERVER_CPU, CLIENT_CPU = "0", "1"
# set from the command line: niceness of every broker and load process (the same for all brokers),
# how long to wait for a quiet machine before a test, when a test counts as disturbed, retries
SETTINGS = {"nice": 0, "quiet_wait_s": 20.0, "noisy_pct": 100.0, "retries": 1}
LOAD_TIMEOUT_S = 180
MATCHING_TIMEOUT_S = 600
MATCHING_RUNS = ((10_000, 50_000), (100_000, 50_000))  # (filters, events)

BROKERS = {
    # name: (protocol, tests)
    "tidings": ("tidings", ["a", "b", "c", "d-best", "d-durable"]),
    "mosquitto": ("mqtt", ["a", "b", "c", "d-best", "d-durable"]),
    "nats": ("nats", ["a", "b", "c", "d-best", "d-durable"]),
    "amqtt": ("mqtt", ["a", "b", "c", "d-best", "d-durable"]),
    # tidings' own MQTT listener (--mqtt), driven by the MQTT load clients as Mosquitto is
    "tidings-mqtt": ("mqtt", ["a", "b", "c", "d-best", "d-durable"]),
    # the yardstick of (d): a C loop that fsyncs each PUBLISH, then forwards it (bench/floor_broker.c)
    "floor": ("mqtt", ["d-best", "d-durable"]),  # write + fsync, as the floor is measured
    "floor-prefilled": ("mqtt", ["d-best", "d-durable"]),  # pwrite over zeros + fdatasync, as tidings' log
}
FLOOR_BROKERS = ("floor", "floor-prefilled")
FLOOR_SOURCE = os.path.join(HERE, "floor_broker.c")
FLOOR_BINARY = os.path.join(WORK, "floor_broker")


TIDINGS_MODES = ("plain", "auth", "tls", "auth+tls", "writer", "loop")
BENCH_IDENTITY = "bench"


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    data_dir: str
    log_path: str
    label: str = ""  # the broker as results name it (tidings modes: tidings+auth, ...)
    load_args: tuple[str, ...] = ()
    load_env: dict[str, str] | None = None  # the loads' environment, when they need a credential

    @property
    def pid(self) -> int:
        return self.proc.pid


def niced() -> list[str]:
    """`nice -n N` (exec's its argument, so the PID we record is the broker's own)."""
    return ["nice", "-n", str(SETTINGS["nice"])] if SETTINGS["nice"] else []


def tidings_executable() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "tidings")
    return here if os.path.exists(here) else os.path.join(REPO, ".venv", "bin", "tidings")


def secure_tidings(mode: str, conf_dir: str) -> tuple[list[str], list[str], dict[str, str] | None]:
    """The broker options, load options and load environment of a tidings mode, its auth file and
    certificates made in conf_dir with the tidings command itself."""
    broker: list[str] = []
    load: list[str] = []
    env = None
    if "auth" in mode:
        auth = os.path.join(conf_dir, "auth.toml")
        made = subprocess.run([tidings_executable(), "auth", "add", BENCH_IDENTITY, "--file", auth,
                               "--publish", "bench/#", "--subscribe", "bench/#"],
                              capture_output=True, text=True, check=True)
        broker += ["--auth", auth]
        env = {**os.environ, "TIDINGS_CREDENTIAL": json.loads(made.stdout)["credential"]}
    if "tls" in mode:
        tls = os.path.join(conf_dir, "tls")
        subprocess.run([tidings_executable(), "tls", "dev-certs", "--dir", tls, "--host", "127.0.0.1"],
                       capture_output=True, text=True, check=True)
        broker += ["--tls-cert", os.path.join(tls, "cert.pem"), "--tls-key", os.path.join(tls, "cert.key")]
        load += ["--tls-ca", os.path.join(tls, "ca.pem")]
    return broker, load, env


def server_command(name: str, port: int, data_dir: str, conf_dir: str) -> list[str]:
    """The command line of one broker, its configuration written into conf_dir."""
    if name == "tidings":
        return [tidings_executable(), "broker", "--data", data_dir, "--listen", f"127.0.0.1:{port}"]
    if name == "tidings-mqtt":  # its own port any free one; the load's is the MQTT listener's
        return [tidings_executable(), "broker", "--data", data_dir, "--listen", "127.0.0.1:0",
                "--mqtt", f"127.0.0.1:{port}"]
    if name == "mosquitto":
        conf = os.path.join(conf_dir, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write(f"# Debian defaults, loopback only, persistence on\n"
                    f"listener {port} 127.0.0.1\nallow_anonymous true\n"
                    f"persistence true\npersistence_location {data_dir}/\n"
                    f"log_dest stderr\nlog_type error\nlog_type warning\n")
        return ["mosquitto", "-c", conf]
    if name == "nats":
        conf = os.path.join(conf_dir, "nats.conf")
        with open(conf, "w") as f:
            f.write(f"# defaults, loopback only, JetStream with file storage\n"
                    f"listen: 127.0.0.1:{port}\n"
                    f"jetstream {{\n  store_dir: \"{data_dir}\"\n  max_file_store: 20GB\n}}\n")
        return ["nats-server", "-c", conf]
    if name == "amqtt":
        conf = os.path.join(conf_dir, "amqtt.yaml")
        with open(conf, "w") as f:
            f.write(f"# amqtt, loopback only, anonymous, no logging or $SYS plugins\n"
                    f"listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:{port}\n"
                    f"plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
                    f"    allow_anonymous: true\n")
        return [os.path.join(PEERS_VENV, "bin", "amqtt"), "-c", conf]
    if name in FLOOR_BROKERS:
        return [FLOOR_BINARY, str(port), data_dir, "prefilled" if name == "floor-prefilled" else "append"]
    raise ValueError(name)


def build_floor() -> str | None:
    """Compile bench/floor_broker.c into the work dir (again when the source is newer); None or why not."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return "no C compiler (cc) to build bench/floor_broker.c"
    if os.path.exists(FLOOR_BINARY) and os.path.getmtime(FLOOR_BINARY) >= os.path.getmtime(FLOOR_SOURCE):
        return None
    os.makedirs(WORK, exist_ok=True)
    built = subprocess.run([compiler, "-O2", "-Wall", "-o", FLOOR_BINARY, FLOOR_SOURCE],
                           capture_output=True, text=True, check=False)
    return None if built.returncode == 0 else f"building floor_broker failed: {built.stderr[-300:]}"


def missing_prerequisite(name: str) -> str | None:
    if name in ("tidings", "tidings-mqtt"):
        exe = tidings_executable()
        if not os.path.exists(exe):
            return f"no {exe} (make install the project venv)"
        probe = subprocess.run([exe, "broker", "--help"], capture_output=True, text=True, check=False)
        return None if probe.returncode == 0 else f"`tidings broker --help` failed: {probe.stderr[-300:]}"
    if name in FLOOR_BROKERS:
        return build_floor()
    exe = {"mosquitto": "mosquitto", "nats": "nats-server"}.get(name)
    if exe and not shutil.which(exe):
        return f"{exe} is not installed (run bench/setup.sh as root)"
    if name == "amqtt" and not os.path.exists(os.path.join(PEERS_VENV, "bin", "amqtt")):
        return f"amqtt is not installed in {PEERS_VENV} (run bench/setup.sh as root)"
    return None


def start_server(name: str, round_no: int, mode: str = "plain") -> Server:
    port = netutil.free_port()
    label = name if mode == "plain" else f"{name}+{mode}"
    base = os.path.join(WORK, "runs", f"{label}-r{round_no}-{port}")
    data_dir, conf_dir = os.path.join(base, "data"), os.path.join(base, "conf")
    os.makedirs(data_dir)
    os.makedirs(conf_dir)
    if name == "mosquitto" and os.geteuid() == 0:
        # started as root, mosquitto drops to its own user: it must own its data directory
        shutil.chown(data_dir, "mosquitto", "mosquitto")
    log_path = os.path.join(WORK, "logs", f"{label}-r{round_no}.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    broker_opts, load_args, load_env = secure_tidings(mode, conf_dir)
    cmd = [*niced(), "taskset", "-c", SERVER_CPU, *server_command(name, port, data_dir, conf_dir), *broker_opts]
    env = {**os.environ}
    env.pop("TIDINGS_SYNC_IN_LOOP", None)  # tidings' loop commits: the broker's default, but in these two modes
    if mode in ("writer", "loop"):
        env["TIDINGS_SYNC_IN_LOOP"] = "1" if mode == "loop" else "0"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = Server(name, proc, port, base, log_path, label, tuple(load_args), load_env)
    if not netutil.wait_port(port, 30.0, alive=lambda: proc.poll() is None):
        stop_server(server)
        raise RuntimeError(f"{name} did not open 127.0.0.1:{port}; see {log_path}")
    return server


def stop_server(server: Server) -> None:
    """SIGTERM our broker (by its PID, never by name), SIGKILL after 15 s; drop its data."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(timeout=5)
    shutil.rmtree(server.data_dir, ignore_errors=True)


def wait_for_quiet(pid: int) -> dict[str, float]:
    """Wait (bounded) until the broker is idle and the machine is nearly idle; report what was seen.
    On a shared machine other workloads come and go, and they disturb throughput far more than
    their CPU share suggests (every wake-up of the broker or a client waits behind them)."""
    t0 = time.monotonic()
    while True:
        pids = netutil.process_tree(pid)
        a, ta = netutil.cpu_times(), netutil.cpu_ticks(pids)
        time.sleep(1.0)
        b, tb = netutil.cpu_times(), netutil.cpu_ticks(pids)
        usage = netutil.cpu_usage(a, b)
        machine = sum(u["busy_pct"] for u in usage.values())  # 100 = one CPU
        server = 100 * (tb - ta) / netutil.CLOCK_TICKS_PER_S
        waited = time.monotonic() - t0
        if (server < 5 and machine < 40) or waited > SETTINGS["quiet_wait_s"]:
            return {"machine_busy_pct_before": round(machine, 1), "server_cpu_pct_before": round(server, 1),
                    "quiet_wait_s": round(waited, 1)}


def run_load(server: Server, proto: str, test: str, extra_args: list[str]) -> dict[str, Any]:
    cmd = [*niced(), "taskset", "-c", CLIENT_CPU, sys.executable, os.path.join(HERE, "loads.py"),
           "--broker", server.label, "--proto", proto, "--port", str(server.port), "--test", test,
           "--server-pid", str(server.pid), *server.load_args, *extra_args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S, check=False,
                              env=server.load_env)
    except subprocess.TimeoutExpired:
        return {"broker": server.label, "test": test, "value": None, "errors": ["load timed out"]}
    lines = proc.stdout.strip().splitlines()
    try:
        return dict(json.loads(lines[-1]))
    except (IndexError, ValueError):
        text = proc.stderr or proc.stdout or f"exit {proc.returncode}"
        first = text.find("Traceback")
        return {"broker": server.label, "test": test, "value": None,
                "errors": [text[max(0, first):][:600] + (" ... " + text[-400:] if len(text) > 1000 else "")]}


def run_matching(filters: int, events: int) -> dict[str, Any]:
    script = os.path.join(HERE, "bench_matching.py")
    base = {"broker": "tidings", "test": "e", "filters": filters, "events": events}
    if not os.path.exists(script):
        return {**base, "value": None, "errors": ["bench/bench_matching.py is not there yet"]}
    cmd = [*niced(), "taskset", "-c", CLIENT_CPU, sys.executable, script, "--filters", str(filters),
           "--events", str(events)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MATCHING_TIMEOUT_S, check=False,
                              cwd=REPO)
    except subprocess.TimeoutExpired:
        return {**base, "value": None, "errors": ["bench_matching.py timed out"]}
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            figures = json.loads(line)
        except ValueError:
            continue
        if isinstance(figures, dict):
            value = next((figures[k] for k in ("events_per_s", "matches_per_s", "value") if k in figures),
                         None)
            return {**base, "value": value, "unit": "events/s", "matching": figures, "errors": []}
    return {**base, "value": None, "errors": [(proc.stderr or proc.stdout)[-800:]]}


def versions() -> dict[str, str]:
    def first_line(cmd: list[str]) -> str:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return "-"
        text = (p.stdout or p.stderr).strip().splitlines()
        return text[0] if text else "-"

    pip = os.path.join(PEERS_VENV, "bin", "pip")
    amqtt = "-"
    if os.path.exists(pip):
        for line in subprocess.run([pip, "list", "--disable-pip-version-check"], capture_output=True,
                                   text=True, check=False).stdout.splitlines():
            if line.lower().startswith("amqtt "):
                amqtt = line.split()[1]
    return {"tidings": tidings_fingerprint(),
            "mosquitto": first_line(["mosquitto", "-h"]), "nats": first_line(["nats-server", "--version"]),
            "amqtt": amqtt, "python": platform.python_version(), "kernel": platform.release(),
            "cpus": str(os.cpu_count())}


def tidings_fingerprint() -> str:
    """The git commit plus a hash of the source tree as it is (it may hold uncommitted work)."""
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "-"
    digest = hashlib.sha256()
    src = os.path.join(REPO, "src", "tidings")
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, src).encode())
                with open(path, "rb") as f:
                    digest.update(f.read())
    return f"{commit}+src:{digest.hexdigest()[:12]}"


def record(out: str, line: dict[str, Any]) -> None:
    with open(out, "a") as f:
        f.write(json.dumps(line) + "\n")


def show(line: dict[str, Any]) -> None:
    value, unit = line.get("value"), line.get("unit", "")
    if line.get("test") == "fsync":
        print(f"  r{line.get('round')} disk       fsync     p50={line.get('p50_us')}us p90={line.get('p90_us')}us "
              f"p99={line.get('p99_us')}us max={line.get('max_us')}us cpu p50={line.get('cpu_p50_us')}us "
              f"(write+fsync of {line.get('record_bytes')} B at {line.get('rate_per_s'):.0f}/s)", flush=True)
        if line.get("prefilled_p50_us") is not None:  # the log's pattern (fsync_floor.py), beside the floor
            print(f"  r{line.get('round')} disk       prefilled p50={line['prefilled_p50_us']}us "
                  f"p99={line.get('prefilled_p99_us')}us cpu p50={line.get('prefilled_cpu_p50_us')}us "
                  f"(pwrite over zeros+fdatasync, as the log writes)", flush=True)
        return
    if line.get("test", "").startswith("d-"):
        shown = f"p50={line.get('p50_us')}us p99={line.get('p99_us')}us"
        if line.get("over_fsync_p50_us") is not None:
            shown += f" (fsync +{line['over_fsync_p50_us']:.0f}/+{line.get('over_fsync_p99_us', 0):.0f})"
        switches = line.get("server_ctx_switches_per_event")
        if switches:
            shown += (f" cpu={line.get('server_cpu_us_per_event')}us/ev "
                      f"cs={switches['voluntary']}+{switches['involuntary']}/ev")
    else:
        shown = f"{value} {unit}"
    mark = " (superseded: disturbed, repeating)" if line.get("superseded") else ""
    print(f"  r{line.get('round')} {line.get('broker'):10s} {line.get('test'):9s} {shown:34s} "
          f"srv={line.get('server_cpu_pct')}% cli={line.get('client_cpu_pct')}% "
          f"foreign={line.get('foreign_cpu_pct')}% rss={line.get('rss_mb_max')}MB loss={line.get('loss_pct')} "
          f"err={line.get('errors') or ''}{mark}", flush=True)
    stalls = line.get("stalls")
    if stalls and stalls.get("episodes"):
        for ep in stalls["episodes"][:5]:
            print(f"     stall at {ep['t_ms']:.0f} ms: {ep['max_us'] / 1000:.1f} ms, {ep['events']} events; "
                  f"{ep['verdict']}", flush=True)


def measure_fsync(round_no: int, run_id: str, tag: str) -> dict[str, Any]:
    """The disk's fsync floor of this round, in the brokers' file system (see above)."""
    line: dict[str, Any] = {"broker": "disk", "test": "fsync", "round": round_no, "run_id": run_id, "tag": tag,
                            "cpu": SERVER_CPU}
    # on the brokers' CPU, idle between brokers: the log writer's fsync returns to a thread there
    os.sched_setaffinity(0, {int(SERVER_CPU)})
    try:
        found = fsync_floor.measure(os.path.join(WORK, "runs"))
    except OSError as exc:
        return {**line, "value": None, "errors": [repr(exc)]}
    finally:
        os.sched_setaffinity(0, {int(CLIENT_CPU)})
    return {**line, **found, "value": found["p50_us"], "unit": "us", "errors": []}


def over_floor(line: dict[str, Any], floor: dict[str, Any] | None) -> None:
    """Note on a d line the round's fsync floor and how far above it the line's p50 and p99 are."""
    if not floor or floor.get("p50_us") is None or line.get("p50_us") is None:
        return
    line["fsync_p50_us"], line["fsync_p99_us"] = floor["p50_us"], floor["p99_us"]
    line["over_fsync_p50_us"] = round(line["p50_us"] - floor["p50_us"], 1)
    if line.get("p99_us") is not None and floor.get("p99_us") is not None:
        line["over_fsync_p99_us"] = round(line["p99_us"] - floor["p99_us"], 1)


def _interrupted(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--brokers", default=",".join(BROKERS))
    ap.add_argument("--tests", default="a,b,c,d,e", help="from a,b,c,d,e (d = d-best and d-durable)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "results.jsonl"))
    ap.add_argument("--tag", default="", help="label stored in every line (e.g. a commit)")
    ap.add_argument("--duration-s", type=float, default=5.0, help="publishing time per throughput test")
    ap.add_argument("--nice", type=int, default=0,
                    help="run brokers and loads at this niceness, the same for all (negative needs root)")
    ap.add_argument("--quiet-wait-s", type=float, default=20.0,
                    help="before each test, wait at most this long for the machine to go quiet")
    ap.add_argument("--noisy-pct", type=float, default=100.0,
                    help="a test during which other work used more than this much CPU (100 = one CPU) "
                         "is repeated (see --retries); the disturbed line is kept, marked superseded")
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--tidings-modes", default="plain",
                    help=f"run tidings in each of these modes, from {','.join(TIDINGS_MODES)} (see above)")
    args = ap.parse_args()
    SETTINGS.update(nice=args.nice, quiet_wait_s=args.quiet_wait_s, noisy_pct=args.noisy_pct,
                    retries=args.retries)
    # SIGTERM and SIGINT (which a background job may have ignored) end the run through the
    # `finally` blocks, so the broker of the moment is stopped too.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupted)
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("the bench pins the broker to CPU 0 and the clients to CPU 1: it needs 2 CPUs")
    if not shutil.which("taskset"):
        raise SystemExit("taskset (util-linux) is needed to pin the broker and the clients")
    brokers = [b for b in args.brokers.split(",") if b]
    for b in brokers:
        if b not in BROKERS:
            raise SystemExit(f"unknown broker {b!r}; choose from {', '.join(BROKERS)}")
    modes = [m for m in args.tidings_modes.split(",") if m]
    if not modes or set(modes) - set(TIDINGS_MODES):
        raise SystemExit(f"--tidings-modes: choose from {', '.join(TIDINGS_MODES)}")
    wanted = set(args.tests.split(","))
    if wanted - set("abcde"):
        raise SystemExit(f"unknown tests {sorted(wanted - set('abcde'))}; choose from a,b,c,d,e")
    os.makedirs(WORK, exist_ok=True)
    os.chmod(WORK, 0o755)  # mosquitto, once it drops root, must still reach its data dir
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    os.sched_setaffinity(0, {int(CLIENT_CPU)})  # this runner keeps off the broker's CPU too
    skipped = {}
    for b in brokers:
        why = missing_prerequisite(b)
        if why:
            skipped[b] = why
            print(f"skipping {b}: {why}", flush=True)
    run_id = time.strftime("%Y%m%dT%H%M%S")
    command = "python bench/run.py " + " ".join(sys.argv[1:])
    record(args.out, {"test": "meta", "run_id": run_id, "tag": args.tag, "command": command.strip(),
                      "versions": versions(), "skipped": skipped, "brokers": brokers,
                      "tests": sorted(wanted), "rounds": args.rounds, "settings": SETTINGS,
                      "tidings_modes": modes})
    print(f"results -> {args.out}\nwork dir {WORK}", flush=True)
    t_all = time.monotonic()
    for round_no in range(1, args.rounds + 1):
        floor = None
        if "d" in wanted:
            floor = measure_fsync(round_no, run_id, args.tag)
            record(args.out, floor)
            show(floor)
        live = [(b, mode) for b in brokers if b not in skipped for mode in (modes if b == "tidings" else ["plain"])]
        k = (round_no - 1) % max(1, len(live))
        for name, mode in live[k:] + live[:k]:
            proto, tests = BROKERS[name]
            tests = [t for t in tests if t[0] in wanted]
            if not tests:
                continue
            print(f"[{time.monotonic() - t_all:5.0f}s] round {round_no}: {name} {mode}", flush=True)
            try:
                server = start_server(name, round_no, mode)
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                line = {"broker": name, "test": "start", "round": round_no, "errors": [str(exc)]}
                record(args.out, {**line, "run_id": run_id})
                print(f"  {exc}", flush=True)
                continue
            try:
                for test in tests:
                    for attempt in range(1 + int(SETTINGS["retries"])):
                        quiet = wait_for_quiet(server.pid)
                        t0 = time.monotonic()
                        line = run_load(server, proto, test, ["--duration-s", str(args.duration_s),
                                                              "--data-dir", server.data_dir])
                        line.update({"round": round_no, "run_id": run_id, "tag": args.tag, "pinned": True,
                                     "nice": args.nice, "attempt": attempt + 1,
                                     "wall_s": round(time.monotonic() - t0, 1), **quiet})
                        if test.startswith("d-"):
                            over_floor(line, floor)
                        noisy = (line.get("foreign_cpu_pct") or 0) > SETTINGS["noisy_pct"]
                        line["superseded"] = noisy and attempt < SETTINGS["retries"]
                        record(args.out, line)
                        show(line)
                        if not line["superseded"]:
                            break
                    if server.proc.poll() is not None:
                        print(f"  {server.label} exited ({server.proc.returncode}); see {server.log_path}")
                        break
                rss_kb, hwm_kb = netutil.memory_kb(netutil.process_tree(server.pid))
                mem = {"broker": server.label, "test": "mem", "round": round_no, "run_id": run_id, "tag": args.tag,
                       "value": round(hwm_kb / 1024, 1), "unit": "MB", "rss_mb_end": round(rss_kb / 1024, 1),
                       "tests": tests}
                record(args.out, mem)
                print(f"  r{round_no} {server.label:10s} peak RSS (VmHWM) {mem['value']} MB", flush=True)
            finally:
                stop_server(server)
        if "e" in wanted and "tidings" in brokers:
            for filters, events in MATCHING_RUNS:
                line = run_matching(filters, events)
                line.update({"round": round_no, "run_id": run_id, "tag": args.tag})
                record(args.out, line)
                print(f"  r{round_no} matching {filters} filters: {line.get('value')} "
                      f"{line.get('errors') or ''}", flush=True)
    print(f"done in {time.monotonic() - t_all:.0f}s; summary: python bench/summarize.py {args.out}")


if __name__ == "__main__":
    main()
