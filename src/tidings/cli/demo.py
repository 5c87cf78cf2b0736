"""`tidings demo` (what `make run` runs): brokers in one overlay, a monitoring workload, a Spark job.

The workload follows PsEPR's PlanetLab monitoring (PLDB): simulated hosts report
`nodes/<host>/load` and `nodes/<host>/mem` with attributes; subscribers use patterns and content
filters. The brokers (three by default) form one Pastry overlay. One of them, the rendez-vous point
of the first subscription's tree, hosts no client: a third of the way through publishing it is
killed (kill -9), and two thirds of the way through it is restarted on the same data, while the
workload goes on. The publisher uses the first other broker and the subscribers the others in turn,
so their events travel on Scribe trees. The workload starts once every subscriber's broker is
attached to its subscription's tree. Each subscriber's stream is checked against what it should
have received (computed here from the published events with the same channel and filter rules):
events lost, duplicated, reordered (out of tick order) and unexpected are counted, all 0 when every
event arrived exactly once, in tick order. Latency is measured publish-call to delivery on one clock.
The JVM that the Spark job starts writes its own warnings to DATA/spark.log rather than into the
summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from tidings.client.client import Client
from tidings.core.channels import pattern_matches
from tidings.core.filters import parse_filter
from tidings.core.multicast.trees import subscription_tree, tree_key
from tidings.core.overlay.node_id import closer
from tidings.testing import Cluster
from tidings.testing.broker_process import BrokerProcess

SITES = ["eu-west", "us-east", "us-west", "ap-south"]
SUBSCRIPTIONS = [
    ("all load, high", "nodes/+/load", "load > 3.0"),
    ("one host, everything", "nodes/host007/#", None),
    ("eu memory pressure", "nodes/+/mem", 'site = "eu-west" and mem_free_mb < 1024'),
    ("everything", "#", None),
]


def _attached(cluster: Cluster, address: str, tree: str) -> bool:
    """The broker at `address` is in `tree` with a parent (or is its root)."""
    status = cluster.status(cluster.by_address(address)) or {}
    return any(t["name"] == tree and (t["parent"] is not None or t["role"].startswith("root"))
               for t in status.get("trees", []))


def _plan(cluster: Cluster) -> tuple[BrokerProcess | None, list[str]]:
    """The broker to kill mid-run (the rendez-vous point of the first subscription's tree: the
    broker whose nodeId is closest to the tree's key, every broker being in every leaf set here),
    and the addresses for the clients, the publisher's first. One broker alone is not killed."""
    if len(cluster.brokers) < 2:
        return None, [cluster[0].address]
    key = tree_key(subscription_tree(SUBSCRIPTIONS[0][1]))
    ids = {b.address: int(b.node_id or "0", 16) for b in cluster.brokers}
    victim = min(cluster.brokers, key=functools.cmp_to_key(
        lambda a, b: -1 if closer(key, ids[a.address], ids[b.address]) else 1))
    return victim, [b.address for b in cluster.brokers if b is not victim]


def _role(cluster: Cluster, broker: BrokerProcess) -> str:
    """What `broker` is in the subscribed trees, from its status."""
    subscribed = {subscription_tree(p) for _, p, _ in SUBSCRIPTIONS}
    roles = [f"{t['role']} of {t['name']}" for t in (cluster.status(broker) or {}).get("trees", [])
             if t["name"] in subscribed and t["role"] != "member"]
    return ", ".join(roles) or "no role in the subscribed trees"


class _Fault:
    """kill -9 of `victim` a third of the way through the rounds, its restart two thirds of the way
    (in the background: publishing goes on), with the times since publishing began."""

    def __init__(self, cluster: Cluster, victim: BrokerProcess | None, rejoin: str, rounds: int) -> None:
        self.cluster, self.victim, self.rejoin, self.rounds = cluster, victim, rejoin, rounds
        self.report: dict[str, Any] = {}
        self.restart: asyncio.Task[Any] | None = None
        self.t0 = time.perf_counter()  # publishing begins
        if victim is not None:
            self.report = {"broker": victim.address, "role": _role(cluster, victim)}

    async def round(self, r: int) -> None:
        victim = self.victim
        if victim is None:
            return
        if r == self.rounds // 3:
            await asyncio.to_thread(self.cluster.kill, victim)
            self.report["killed_s"] = round(time.perf_counter() - self.t0, 3)
        if r == 2 * self.rounds // 3:
            victim.join = self.rejoin  # (had it founded the overlay, it must now join it)
            self.restart = asyncio.create_task(asyncio.to_thread(victim.start))
            self.report["restarted_s"] = round(time.perf_counter() - self.t0, 3)

    async def done(self) -> dict[str, Any]:
        if self.restart is not None:
            await self.restart
            await asyncio.to_thread(self.cluster.wait_joined, 60)
            self.report["rejoined_s"] = round(time.perf_counter() - self.t0, 3)
        return self.report


def _stream_faults(got: list[int], want: list[int]) -> dict[str, int]:
    """Events lost, duplicated, out of tick order and unexpected in one subscriber's stream."""
    wanted, seen = set(want), set(got)
    return {"lost": len(wanted - seen), "duplicated": len(got) - len(seen),
            "reordered": sum(1 for a, b in itertools.pairwise(got) if b < a), "unexpected": len(seen - wanted)}


def _events(hosts: int, rounds: int, rng: random.Random) -> list[tuple[str, bytes, dict[str, Any]]]:
    out = []
    for r in range(rounds):
        for h in range(hosts):
            host = f"host{h:03d}"
            site = SITES[h % len(SITES)]
            load = round(rng.uniform(0.0, 6.0), 2)
            out.append((f"nodes/{host}/load", f"round {r}".encode(),
                        {"host": host, "site": site, "load": load}))
            out.append((f"nodes/{host}/mem", f"round {r}".encode(),
                        {"host": host, "site": site, "mem_free_mb": rng.randint(100, 8000)}))
    return out


async def _consume(sub: Any, expected: int, received: list[tuple[int, int]]) -> None:
    """Record (tick, arrival time) of each event until `expected` arrived or 10 s pass in silence."""
    while len(received) < expected:
        try:
            batch = await asyncio.wait_for(sub.next_batch(), 10)
        except TimeoutError:
            return
        now = time.perf_counter_ns()
        received.extend((ev.tick, now) for ev in batch)


async def _workload(cluster: Cluster, hosts: int, rounds: int) -> dict[str, Any]:
    rng = random.Random(7)
    events = _events(hosts, rounds, rng)
    per_round = 2 * hosts
    victim, addresses = _plan(cluster)
    subs = []
    for i, (name, pattern, flt) in enumerate(SUBSCRIPTIONS):  # away from the publisher if possible
        at = addresses[1 + i % (len(addresses) - 1) if len(addresses) > 1 else 0]
        client = await Client.connect(at, service="demo-monitor", instance=name)
        check = parse_filter(flt) if flt else None
        expected = sum(1 for ch, _, attrs in events
                       if pattern_matches(pattern, ch) and (check is None or check.matches(attrs)))
        received: list[tuple[int, int]] = []
        task = asyncio.create_task(_consume(await client.subscribe(pattern, filter=flt), expected, received))
        subs.append((name, pattern, flt, client, expected, received, task, at))
        await asyncio.to_thread(cluster.wait, lambda at=at, p=pattern: _attached(cluster, at, subscription_tree(p)),
                                30, f"{at} attached to the tree of {pattern}")
    publisher = await Client.connect(addresses[0], service="pldb", instance="collector-1")
    sent_at: dict[int, int] = {}
    ticks: list[int] = []
    fault = _Fault(cluster, victim, addresses[0], rounds)
    t0 = fault.t0
    for r, i in enumerate(range(0, len(events), per_round)):  # one report round of every host, every 20 ms
        await fault.round(r)
        stamp = time.perf_counter_ns()
        for res in await publisher.publish_many(events[i:i + per_round]):
            sent_at[res.tick] = stamp
            ticks.append(res.tick)
        await asyncio.sleep(0.02)
    publish_s = time.perf_counter() - t0
    by_tick = dict(zip(ticks, events, strict=True))
    report: dict[str, Any] = {"published": len(events), "publish_seconds": round(publish_s, 3), "subscribers": [],
                              "publisher": addresses[0], "fault": await fault.done()}
    latencies: list[int] = []
    for name, pattern, flt, client, expected, received, task, at in subs:
        await task
        check = parse_filter(flt) if flt else None
        want = [t for t in ticks if pattern_matches(pattern, by_tick[t][0])
                and (check is None or check.matches(by_tick[t][2]))]
        got = [t for t, _ in received]
        latencies += [at - sent_at[t] for t, at in received if t in sent_at]
        report["subscribers"].append({"name": name, "pattern": pattern, "filter": flt, "expected": expected,
                                      "broker": at, "delivered": len(got), **_stream_faults(got, want)})
        await client.close()
    await publisher.close()
    latencies.sort()
    if latencies:
        report["latency_ms"] = {p: round(latencies[min(len(latencies) - 1, int(len(latencies) * q))] / 1e6, 3)
                                for p, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))}
    return report


def format_latency(latency_ms: dict[str, float] | None) -> str:
    if not latency_ms:
        return "no deliveries measured"
    return ", ".join(f"{p} {v:.3f} ms" for p, v in latency_ms.items())


@contextlib.contextmanager
def child_stderr_to(path: Path) -> Any:
    """Processes started inside the block (the JVM pyspark launches) write their stderr to `path`
    for their whole life; this process's stderr is back in place after the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _spark_summary(address: str, log: Path) -> list[dict[str, Any]]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the demo stays on loopback
    from pyspark.sql import SparkSession

    from tidings.spark.jobs import load_summary

    with child_stderr_to(log):
        spark = (SparkSession.builder.master("local[2]").appName("tidings-demo")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return load_summary(spark, address)
    finally:
        spark.stop()


def run_demo(data: Path, hosts: int, rounds: int, spark: bool, brokers: int = 3) -> int:
    data.mkdir(parents=True, exist_ok=True)
    print(f"starting {brokers} brokers in one overlay, their logs under {data}/cluster ...", flush=True)
    cluster = Cluster(data / "cluster", brokers, http=True).start()
    ok = True
    try:
        print(f"brokers listening on {', '.join(b.address for b in cluster.brokers)}; "
              f"{hosts} hosts x {rounds} rounds x 2 metrics", flush=True)
        print(f"metrics: {', '.join(f'http://{b.http_address}/metrics' for b in cluster.brokers)} "
              f"(and /status); live dashboard: http://{cluster.brokers[0].http_address}/", flush=True)
        report = asyncio.run(_workload(cluster, hosts, rounds))
        print(f"\npublished {report['published']} events at {report['publisher']} in {report['publish_seconds']} s, "
              f"in rounds of {2 * hosts} every 20 ms (each acknowledged after fsync)")
        print(f"latency publish -> delivery: {format_latency(report.get('latency_ms'))}")
        fault = report["fault"]
        if fault:
            print(f"broker {fault['broker']} ({fault['role']}, no client) killed with kill -9 "
                  f"{fault['killed_s']} s after publishing began, restarted at {fault['restarted_s']} s, "
                  f"back in the overlay at {fault['rejoined_s']} s")
        for s in report["subscribers"]:
            faults = {k: s[k] for k in ("lost", "duplicated", "reordered", "unexpected")}
            ok &= not any(faults.values())
            print(f"  {s['name']:<22} at {s['broker']:<16} {s['pattern']:<16} filter={s['filter']!s:<42} "
                  f"delivered {s['delivered']}/{s['expected']} "
                  + " ".join(f"{k} {v}" for k, v in faults.items())
                  + ("  (exactly once, in order)" if not any(faults.values()) else "  MISMATCH"))
        if spark:
            print(f"\nSpark batch job over the broker's events (top hosts by mean load; Spark's own log: "
                  f"{data / 'spark.log'}):", flush=True)
            for row in _spark_summary(report["publisher"], data / "spark.log"):
                print("  " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                       for k, v in row.items()))
    finally:
        cluster.stop()
        print("\nbrokers stopped")
    return 0 if ok else 1
