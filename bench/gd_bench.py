#!/usr/bin/env python3
"""Guaranteed delivery across brokers: its cost, cross-broker throughput against a NATS cluster,
and end-to-end latency over the overlay. Real broker processes on 127.0.0.1.

  python bench/gd_bench.py [--tests overhead,cross,latency] [--rounds 1] [--duration-s 5]
                           [--window 10000] [--shb-stall-ms 0]
                           [--modes gd,best-effort] [--out bench/results/gd_bench.jsonl]

  overhead  3 brokers (`tidings.testing.Cluster`), publisher on one, subscribers on the two others,
            run with guaranteed delivery and with `best_effort_delivery = true` in the same round:
            (1) throughput, closed loop as bench/loads.py (window of 10,000 events ahead of the
            slowest subscriber and 10,000 unacknowledged), events delivered/s in all; (2) the
            paper's CPU comparison at a fixed input rate (--fixed-rate, default 2,000 events/s,
            one subscriber on another broker): CPU of the publisher's broker (PHB) and the
            subscriber's (SHB) from /proc/PID/stat, and the latency meanwhile.
  cross     the same tidings throughput (guaranteed delivery) against a 3-server NATS cluster
            (routes on 127.0.0.1) with a JetStream file stream (one replica, acked publishes, one
            durable push consumer with explicit acks per subscriber), publisher and consumers on
            three different servers; nats-server from bench/setup.sh.
  latency   5 brokers (leaf sets of two, so routes and trees take several hops), publisher on one,
            subscriber on another, 1,000 events/s, 5,500 events (first 500 not measured), p50/p99
            of publish-to-delivery time on one clock (bench/loads.py's latency test).

Each test also reports, per broker, where events were lost between brokers and repaired ("loss":
nacks sent, knowledge retransmitted, nacks answered from the log, ticks read back, messages the peer
links dropped, records the stream caches let go while still wanted) and what flow control held
back (core/reliability/flow_window.py). `--window` lets the publisher run further ahead of its
subscribers, `--shb-stall-ms` stops the subscribers' broker that long once a second: an overrun
subscriber's broker, for `--modes gd,gd-unpaced` (with and without flow control).

Every result is one JSON line with the load average and the machine's CPU use during the test.
Brokers, the NATS servers and the load share the machine's CPUs (no pinning: a cluster of several
brokers on 2 CPUs cannot be pinned one per CPU), so compare figures measured in the same round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loads  # noqa: E402
import netutil  # noqa: E402
from tidings.core.multicast.trees import subscription_tree, tree_key  # noqa: E402
from tidings.core.overlay.node_id import closer  # noqa: E402
from tidings.testing import Cluster  # noqa: E402

LIVENESS = {"ping_interval_ns": 500_000_000, "keepalive_interval_ns": 300_000_000,
            "failure_timeout_ns": 1_000_000_000, "heartbeat_interval_ns": 300_000_000,
            "parent_timeout_ns": 1_000_000_000}
WINDOW = 10_000
COUNT_MAX = 1_000_000


class Spread:
    """An adapter of bench/loads.py whose publisher connects to one server and whose subscriber i
    connects to sub_ports[i % len(sub_ports)]."""

    def __init__(self, inner: Any, pub_port: int, sub_ports: list[int]) -> None:
        self.inner, self.pub_port, self.sub_ports = inner, pub_port, sub_ports

    def prepare(self) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while True:  # a NATS cluster answers JetStream requests once it has a meta leader
            try:
                return dict(self.inner.prepare())
            except (RuntimeError, OSError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def subscriber(self, index: int, want_stamps: bool) -> Any:
        self.inner.port = self.sub_ports[index % len(self.sub_ports)]
        try:
            return self.inner.subscriber(index, want_stamps)
        finally:
            self.inner.port = self.pub_port

    def publisher(self) -> Any:
        return self.inner.publisher()

    def finish(self) -> None:
        self.inner.finish()


def context() -> dict[str, Any]:
    return {"loadavg": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# where events are lost between brokers and repaired, per broker, from its /status (counters since it
# started; a test reports the difference over its run): the nacks its streams sent upstream, the
# knowledge its streams sent again answering its children's nacks, the nacks its pubend answered and
# the ticks it read back from its log, the messages its peer links dropped (a link's queue full), the
# records its stream caches let go that a consumer still wanted, and the knowledge flow control held
# back (a link's credit used up: sent later, never dropped)
LOSS_COUNTERS: dict[str, tuple[str, ...]] = {
    "nacks_sent": ("delivery", "nacks_sent"),
    "nack_ticks_sent": ("delivery", "nack_ticks_sent"),
    "retransmissions_sent": ("delivery", "retransmissions_sent"),
    "nacks_received": ("delivery", "source", "nacks_received"),
    "ticks_retransmitted": ("delivery", "source", "ticks_retransmitted"),
    "cache_records_evicted": ("delivery", "cache_records_evicted"),
    "flow_holds": ("delivery", "source", "flow_holds"),
    "flow_stalls": ("delivery", "source", "flow_stalls"),
    "flow_read_backs": ("delivery", "source", "flow_read_backs"),
    "flow_records_read": ("delivery", "source", "flow_records_read"),
}


def loss_counters(cluster: Cluster, roles: dict[str, int]) -> dict[str, dict[str, int]]:
    """Each role's broker's LOSS_COUNTERS, and `link_drops`: messages its peer links dropped."""
    out: dict[str, dict[str, int]] = {}
    for role, index in roles.items():
        status = cluster.status(cluster.brokers[index]) or {}
        got: dict[str, int] = {}
        for name, path in LOSS_COUNTERS.items():
            value: Any = status
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if isinstance(value, int):
                got[name] = value
        links = status.get("peers", [])
        got["link_drops"] = sum(int(link.get("dropped", 0)) for link in links)
        # messages over the peer links, both ways: per event, how well batches cross a link as one
        got["peer_messages_sent"] = sum(int(link.get("sent", 0)) for link in links)
        got["peer_messages_received"] = sum(int(link.get("received", 0)) for link in links)
        out[role] = got
    return out


def loss_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {role: {k: v - before.get(role, {}).get(k, 0) for k, v in counts.items()} for role, counts in after.items()}


def cpu_of(pids: dict[str, int]) -> dict[str, int]:
    return {name: netutil.cpu_ticks(netutil.process_tree(pid)) for name, pid in pids.items()}


def with_cpu(pids: dict[str, int], fn: Any, watch: Any = None, counters: Any = None) -> dict[str, Any]:
    """Run fn(), adding each named process's CPU over the call (100 = one CPU) and the machine's;
    `watch()` (the tree's path) is polled meanwhile and its longest answer kept as "path";
    `counters()` (loss_counters) is read before and after, their difference kept as "loss"."""
    counted = None if counters is None else counters()
    seen: list[list[str]] = [[]]
    done = threading.Event()

    def poll() -> None:
        while not done.wait(0.5):
            with contextlib.suppress(Exception):
                path = watch()
                if len(path) > len(seen[0]):
                    seen[0] = path

    poller = threading.Thread(target=poll, daemon=True)
    if watch is not None:
        poller.start()
    before, machine0, t0 = cpu_of(pids), netutil.cpu_times(), time.monotonic()
    try:
        out: dict[str, Any] = fn()
    finally:
        done.set()
    if watch is not None:
        poller.join(5)
        out["path"] = seen[0]
    after, machine1, span = cpu_of(pids), netutil.cpu_times(), time.monotonic() - t0
    cpu_s = {name: (after[name] - before[name]) / netutil.CLOCK_TICKS_PER_S for name in pids}
    out["broker_cpu_pct"] = {name: round(100 * v / span, 1) for name, v in cpu_s.items()}
    if out.get("sent"):  # CPU per event published: comparable across runs of different rates
        out["broker_cpu_us_per_event"] = {name: round(1e6 * v / out["sent"], 1) for name, v in cpu_s.items()}
    if counted is not None:
        out["loss"] = loss_delta(counted, counters())
    usage = netutil.cpu_usage(machine0, machine1)
    out["machine_busy_pct"] = round(sum(u["busy_pct"] for u in usage.values()), 1)
    out["span_s"] = round(span, 2)
    return out


@contextlib.contextmanager
def stalls(pid: int, stall_ms: int) -> Iterator[None]:
    """Stop process `pid` (SIGSTOP) for `stall_ms` once a second, from a second on, while the body
    runs: a subscriber's broker that falls behind in bursts (no stalls when `stall_ms` is 0)."""
    done = threading.Event()

    def stall() -> None:
        while not done.wait(1.0):
            os.kill(pid, signal.SIGSTOP)
            try:
                done.wait(stall_ms / 1000)
            finally:
                os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=stall, daemon=True)
    if stall_ms:
        thread.start()
    try:
        yield
    finally:
        done.set()
        if stall_ms:
            thread.join(5)


def throughput(adapter: Any, duration_s: float, window: int = WINDOW) -> dict[str, Any]:
    cfg = {"test": "x", "subs": 2, "sub_procs": 2, "duration_s": duration_s, "drain_s": 10.0, "idle_s": 3.0,
           "count": COUNT_MAX, "window": window, "ack_window": window, "batch": 100}
    meta = adapter.prepare()
    try:
        return meta | loads.run_throughput(adapter, cfg, None)
    finally:
        adapter.finish()


def latency(adapter: Any, rate: float, count: int, warmup: int) -> dict[str, Any]:
    meta = adapter.prepare()
    try:
        return meta | loads.run_latency(adapter, {"rate": rate, "count": count, "warmup": warmup,
                                                  "drain_s": 10.0, "idle_s": 3.0}, None)
    finally:
        adapter.finish()


@contextlib.contextmanager
def tidings_cluster(size: int, extra: dict[str, Any] | None = None) -> Iterator[Cluster]:
    with tempfile.TemporaryDirectory(prefix="gd-bench-") as tmp:
        config = LIVENESS | {"leaf_set_size": 2} | (extra or {})
        with Cluster(Path(tmp), size, config, identities=[f"p-gd-bench-{k}" for k in range(size)]) as cluster:
            # the ring settled: two brokers that joined together may hold a wrong neighbour for a
            # moment, and a tree then has two rendez-vous points (docs/cluster.md, "Brokers that join together")
            cluster.wait_ring()
            yield cluster


def nonce() -> str:
    return os.urandom(4).hex()


class _Closeness:
    """Sort key: brokers numerically closest to a tree key first (Pastry's tie rule included)."""

    def __init__(self, key: int, node_id: int) -> None:
        self.key, self.node_id = key, node_id

    def __lt__(self, other: _Closeness) -> bool:
        return closer(self.key, self.node_id, other.node_id)


def rooted_nonce(cluster: Cluster, root: int, tag: str) -> str:
    """A nonce whose channel `bench/NONCE` (bench/loads.py's) has its tree's rendez-vous point at
    broker `root`: the same tree shape for every mode compared, and a known intermediate."""
    for i in range(100_000):
        key = tree_key(subscription_tree(f"bench/{tag}{i}"))
        if min(cluster.brokers, key=lambda b: _Closeness(key, int(b.node_id or "0", 16))) is cluster.brokers[root]:
            return f"{tag}{i}"
    raise RuntimeError(f"no channel rooted at broker {root}")


def path_up(cluster: Cluster, channel: str, broker: int) -> list[str]:
    """The tree's path from `broker` up to its root, from the brokers' status."""
    tree = subscription_tree(channel)
    parents = {}
    for address, status in cluster.statuses().items():
        for t in (status or {}).get("trees", []):
            if t["name"] == tree:
                parents[address] = t["parent"]
    path = [cluster.brokers[broker].address]
    while parents.get(path[-1]) and len(path) <= len(cluster.brokers):
        path.append(parents[path[-1]])
    return path


def tidings_adapter(cluster: Cluster, durable: bool, tag: str, pub: int, subs: list[int]) -> Spread:
    ports = [b.port for b in cluster.brokers]
    inner = loads.TidingsAdapter(ports[pub], durable, tag, len(subs))
    return Spread(inner, ports[pub], [ports[i] for i in subs])


def run_overhead(args: argparse.Namespace, emit: Any) -> None:
    """PHB broker 1, the tree's root (the intermediate) broker 2, both subscribers on broker 0 (the
    SHB); the same trees in both modes (same nodeIds, same channels)."""
    tags: list[str] = []
    for mode, extra in (("gd", {}), ("best-effort", {"best_effort_delivery": "true"}),
                        ("gd-unpaced", {"flow_control": "false"})):
        if mode not in args.modes.split(","):
            continue
        with tidings_cluster(3, extra) as cluster:
            # two channels: a GD subscription starts a clock-skew allowance (1 s) back, so the
            # fixed-rate test must not see the throughput test's events
            tags = tags or [rooted_nonce(cluster, 2, nonce() + kind) for kind in "tf"]
            b = cluster.brokers
            pids = {"phb": b[1].pid, "intermediate": b[2].pid, "shb": b[0].pid}
            counters = partial(loss_counters, cluster, {"phb": 1, "intermediate": 2, "shb": 0})
            load = partial(throughput, tidings_adapter(cluster, True, tags[0], 1, [0, 0]), args.duration_s, args.window)
            with stalls(b[0].pid, args.shb_stall_ms):
                res = with_cpu(pids, load, partial(path_up, cluster, f"bench/{tags[0]}", 0), counters)
            emit({"test": "gd-overhead-throughput", "mode": mode, "brokers": 3} | res | context())
            count = int(args.fixed_rate * args.duration_s)
            res = with_cpu(pids, partial(latency, tidings_adapter(cluster, False, tags[1], 1, [0]), args.fixed_rate,
                                         count, count // 10), partial(path_up, cluster, f"bench/{tags[1]}", 0),
                           counters)
            emit({"test": "gd-overhead-cpu", "mode": mode, "brokers": 3, "rate_per_s": args.fixed_rate}
                 | res | context())


@contextlib.contextmanager
def nats_cluster(size: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    if not shutil.which("nats-server"):
        raise RuntimeError("nats-server is not installed (run bench/setup.sh as root)")
    with tempfile.TemporaryDirectory(prefix="gd-bench-nats-") as tmp:
        ports = [netutil.free_port() for _ in range(size)]
        routes = [netutil.free_port() for _ in range(size)]
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for i in range(size):
                conf = Path(tmp) / f"n{i}.conf"
                route_list = ", ".join(f"nats-route://127.0.0.1:{r}" for r in routes)
                # one server alone runs without a cluster block: a lone clustered server has no JetStream quorum
                cluster = "" if size == 1 else (f"cluster {{\n  name: tb\n  listen: 127.0.0.1:{routes[i]}\n"
                                                f"  routes: [{route_list}]\n}}\n")
                conf.write_text(f"server_name: n{i}\nlisten: 127.0.0.1:{ports[i]}\n"
                                f"jetstream {{\n  store_dir: \"{tmp}/data{i}\"\n  max_file_store: 20GB\n}}\n"
                                + cluster)
                with open(Path(tmp) / f"n{i}.log", "wb") as log:  # the child keeps its own descriptor
                    procs.append(subprocess.Popen(["nats-server", "-c", str(conf)], stdout=log,
                                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            for p, port in zip(procs, ports, strict=True):
                if not netutil.wait_port(port, 30.0, alive=lambda p=p: p.poll() is None):
                    raise RuntimeError(f"nats-server did not open 127.0.0.1:{port}")
            for p, port in zip(procs, ports, strict=True):
                p.port = port  # type: ignore[attr-defined]
            yield procs
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(15)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait(5)


def run_cross(args: argparse.Namespace, emit: Any) -> None:
    with tidings_cluster(3) as cluster:
        b = cluster.brokers
        tag = rooted_nonce(cluster, 2, nonce())
        pids = {"phb": b[1].pid, "shb": b[0].pid, "shb2": b[2].pid}
        res = with_cpu(pids, partial(throughput, tidings_adapter(cluster, True, tag, 1, [0, 2]), args.duration_s,
                                            args.window),
                       partial(path_up, cluster, f"bench/{tag}", 0),
                       partial(loss_counters, cluster, {"phb": 1, "shb": 0, "shb2": 2}))
        emit({"test": "gd-cross", "broker": "tidings", "servers": 3} | res | context())
    with nats_cluster(3) as procs:
        ports = [p.port for p in procs]  # type: ignore[attr-defined]
        inner = loads.NatsAdapter(ports[0], True, nonce(), 2)
        adapter = Spread(inner, ports[0], ports[1:])
        pids = {"pub-server": procs[0].pid, "sub-server": procs[1].pid, "sub-server2": procs[2].pid}
        res = with_cpu(pids, lambda: throughput(adapter, args.duration_s, args.window))
        emit({"test": "gd-cross", "broker": "nats-jetstream-cluster", "servers": 3} | res | context())


def run_latency(args: argparse.Namespace, emit: Any) -> None:
    """PHB broker 1, SHB broker 3, the tree rooted at broker 4 (so at least PHB -> root -> SHB)."""
    with tidings_cluster(5) as cluster:
        b = cluster.brokers
        tag = rooted_nonce(cluster, 4, nonce())
        adapter = tidings_adapter(cluster, False, tag, 1, [3])
        pids = {"phb": b[1].pid, "root": b[4].pid, "shb": b[3].pid}
        res = with_cpu(pids, partial(latency, adapter, 1000.0, args.latency_count, args.latency_count // 11),
                       partial(path_up, cluster, f"bench/{tag}", 3),
                       partial(loss_counters, cluster, {"phb": 1, "root": 4, "shb": 3}))
        emit({"test": "gd-latency", "brokers": 5, "publisher_broker": b[1].address} | res | context())


TESTS = {"overhead": run_overhead, "cross": run_cross, "latency": run_latency}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tests", default="overhead,cross,latency")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--duration-s", type=float, default=5.0, help="publishing time per throughput test")
    ap.add_argument("--window", type=int, default=WINDOW, help="throughput: events the publisher runs ahead of the "
                    "slowest subscriber (and unacknowledged); a large one lets it overrun the subscribers' brokers")
    ap.add_argument("--shb-stall-ms", type=int, default=0, help="overhead: stop the subscribers' broker this long "
                    "once a second during the throughput test (an overrun subscriber's broker)")
    ap.add_argument("--fixed-rate", type=float, default=2000.0, help="overhead: events/s for the CPU comparison")
    ap.add_argument("--modes", default="gd,best-effort", help="overhead: which modes to run (to compare two "
                    "checkouts of one mode, alternately; gd-unpaced: guaranteed delivery without flow control)")
    ap.add_argument("--latency-count", type=int, default=5500, help="latency: events sent at 1,000/s")
    ap.add_argument("--out", default=str(HERE / "results" / "gd_bench.jsonl"))
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the clusters on the way out
    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime())

    def emit(line: dict[str, Any]) -> None:
        line = {"run_id": run_id, "tag": args.tag} | line
        with open(args.out, "a") as f:
            f.write(json.dumps(line) + "\n")
        keep = ("test", "mode", "broker", "path", "value", "unit", "delivered_per_s", "loss_pct", "p50_us", "p99_us",
                "broker_cpu_pct", "broker_cpu_us_per_event", "loss", "machine_busy_pct", "loadavg", "errors")
        print(json.dumps({k: line[k] for k in keep if k in line}), flush=True)

    for _ in range(args.rounds):
        for name in args.tests.split(","):
            TESTS[name](args, emit)


if __name__ == "__main__":
    main()
