"""`tidings demo` (what `make run` runs): the PLDB pipeline of the PsEPR paper (§4) on brokers in
one overlay.

The workload follows PsEPR's PlanetLab database (PLDB). Monitors, one per simulated host, report
`nodes/<host>/load` and `nodes/<host>/mem` with attributes every ROUND_S; subscribers use patterns
and content filters. The brokers (three by default) form one Pastry overlay. One of them, the
rendez-vous point of the first subscription's tree, hosts no client: a third of the way through
publishing it is killed (kill -9), and two thirds of the way through it is restarted on the same
data, while the workload goes on. The publisher uses the first other broker and the subscribers
the others in turn, so their events travel on Scribe trees.

Beside the subscribers run the PLDB services: the tuple store (`tidings tuple-store`, its own
process, killed with kill -9 half way and restarted from its SQLite), which keeps each host's
latest properties, answers the query client's questions on `pldb/query/<id>` and records
recommendations; and, unless Spark is off or Java is missing, the Spark health stream
(tidings.spark.jobs.health_stream), which reads a durable subscription to the load reports with a
1 s trigger and publishes per-site, per-window recommendations through the exactly-once sink. A
last report, the punctuation, moves the stream's watermark past the last window. After the run a
Spark batch job over the archive draws PNG plots.

Every stage is checked against what it should have received, computed here from what was
published (the acknowledged (pubend, tick) of each event, with the same channel and filter rules),
never from what a broker reports: events lost, duplicated, reordered and unexpected, all 0 when
each arrived exactly once and in order. The tuple store's input is read from its own journal. A
recommendation's event count is checked against the reports of its window (`miscounted`).
Latency is measured publish-call to delivery on one clock. The JVM writes its own warnings to
DATA/spark.log, the tuple store to DATA/tuple-store.log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import random
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tidings.cli.demo_io import StoreProcess, child_stderr_to
from tidings.cli.demo_spark import SparkSide
from tidings.client.client import Client
from tidings.core.channels import pattern_matches
from tidings.core.filters import parse_filter
from tidings.core.multicast.trees import subscription_tree, tree_key
from tidings.core.overlay.node_id import closer
from tidings.pldb import audit, tuple_store
from tidings.spark import jobs
from tidings.spark.java import spark_problem
from tidings.testing import Cluster
from tidings.testing.broker_process import BrokerProcess

__all__ = ["child_stderr_to", "format_latency", "run_demo"]

ROUND_S = 0.25  # between two reports of a monitor
QUERY_EVERY_ROUNDS = 2
QUERIES = ['site = "eu-west" and load > 4.5', "mem_free_mb < 300", 'host = "host007"', "load >"]  # the last is refused
POLL_S = 0.05
DRAIN_S = 30.0  # the longest wait for a stage to receive what it should, once publishing ended
SPARK_DRAIN_S = 90.0
SUPERVISE_S = 0.5
BROKER_BACK_S = 60.0
WINDOW_US = jobs.HEALTH_WINDOW_S * 1_000_000
PUNCTUATION_MARGIN_US = 200_000
PUNCTUATION = ("nodes/pldb-end/load", b"end of run",
               {"host": "pldb-end", "site": "end-of-run", "load": 0.0, "punctuation": True})
SITES = ["eu-west", "us-east", "us-west", "ap-south"]
SUBSCRIPTIONS = [
    ("all load, high", "nodes/+/load", "load > 3.0"),
    ("one host, everything", "nodes/host007/#", None),
    ("eu memory pressure", "nodes/+/mem", 'site = "eu-west" and mem_free_mb < 1024'),
    ("every report", "nodes/#", None),
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

    def nearer(a: BrokerProcess, b: BrokerProcess) -> int:
        return -1 if closer(key, ids[a.address], ids[b.address]) else 1

    victim = min(cluster.brokers, key=functools.cmp_to_key(nearer))
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


async def _collect(sub: Any, into: list[tuple[Any, int]]) -> None:
    """Append (event, arrival time) for every event of `sub` until it ends or is cancelled."""
    while True:
        batch = await sub.next_batch()
        if not batch:
            return
        now = time.perf_counter_ns()
        into.extend((ev, now) for ev in batch)


async def _until(condition: Any, timeout_s: float) -> bool:
    """Poll `condition` until it holds or `timeout_s` pass; whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


def _percentiles(values: list[int]) -> dict[str, float]:
    values = sorted(values)
    return {p: round(values[min(len(values) - 1, int(len(values) * q))] / 1e6, 3)
            for p, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))} if values else {}


class _Workload:
    """The monitors, the subscribers, the query client, the tuple store and the faults of one run."""

    def __init__(self, cluster: Cluster, hosts: int, rounds: int, store: StoreProcess, spark: Any) -> None:
        self.cluster, self.hosts, self.rounds, self.store, self.spark = cluster, hosts, rounds, store, spark
        self.events = _events(hosts, rounds, random.Random(7))
        self.victim, self.addresses = _plan(cluster)
        self.subs: list[tuple[str, str, str | None, Any, list[tuple[Any, int]], asyncio.Task[None], str]] = []
        self.answers: list[tuple[Any, int]] = []
        self.recommendations: list[tuple[Any, int]] = []
        self.queries: list[str] = []
        self.asked: list[tuple[str, int]] = []  # the query events' (pubend, tick)
        self.published: list[tuple[str, int, int]] = []  # (pubend, tick, publish call time) per event
        self.supervisor: asyncio.Task[None] | None = None  # restarts the health query
        self.spark_error: str | None = None

    async def _wait_attached(self, at: str, pattern: str) -> None:
        tree = subscription_tree(pattern)
        await asyncio.to_thread(self.cluster.wait, lambda: _attached(self.cluster, at, tree), 30,
                                f"{at} attached to the tree of {pattern}")

    async def _subscribe(self) -> tuple[Client, list[asyncio.Task[None]]]:
        for i, (name, pattern, flt) in enumerate(SUBSCRIPTIONS):  # away from the publisher if possible
            at = self.addresses[1 + i % (len(self.addresses) - 1) if len(self.addresses) > 1 else 0]
            client = await Client.connect(at, service="demo-monitor", instance=name, follow_advice=False)
            received: list[tuple[Any, int]] = []
            task = asyncio.create_task(_collect(await client.subscribe(pattern, filter=flt), received))
            self.subs.append((name, pattern, flt, client, received, task, at))
            await self._wait_attached(at, pattern)
        for pattern in (tuple_store.PROPERTIES, tuple_store.QUERIES, tuple_store.RECOMMENDATIONS):
            await self._wait_attached(self.store.broker, pattern)
        asker = await Client.connect(self.addresses[0], service="pldb-query", instance="supervisor",
                                     follow_advice=False)
        tasks = [asyncio.create_task(_collect(await asker.subscribe("pldb/answer/+"), self.answers)),
                 asyncio.create_task(_collect(await asker.subscribe("pldb/recommend/+"), self.recommendations))]
        for pattern in ("pldb/answer/+", "pldb/recommend/+"):
            await self._wait_attached(self.addresses[0], pattern)
        return asker, tasks

    async def _store_fault(self, r: int, report: dict[str, Any], t0: float) -> asyncio.Task[None] | None:
        if r != self.rounds // 2:
            return None
        await asyncio.to_thread(self.store.kill)
        report["store_killed_s"] = round(time.perf_counter() - t0, 3)

        async def restart() -> None:
            await asyncio.to_thread(self.store.start)
            report["restarted_s"] = round(time.perf_counter() - t0, 3)  # it is ready again
        return asyncio.create_task(restart())

    async def run(self) -> dict[str, Any]:
        spark_start = asyncio.create_task(asyncio.to_thread(self.spark.start, self.addresses[-1])) \
            if self.spark is not None else None
        asker, tasks = await self._subscribe()
        supervisor = None
        if spark_start is not None:
            try:
                await spark_start  # the stream runs while the monitors publish
            except Exception as exc:  # reported in the summary; the rest of the run goes on
                self.spark_error = f"the health query did not start: {exc}"
                self.spark = None
            else:
                supervisor = asyncio.create_task(self._supervise())
        # the demo's clients stay where it put them: the broker it kills is the one with no client
        # (a "closer" hint could take the publisher there, and a publisher does not fail over)
        publisher = await Client.connect(self.addresses[0], service="pldb", instance="collector-1",
                                         follow_advice=False)
        per_round = 2 * self.hosts
        fault = _Fault(self.cluster, self.victim, self.addresses[0], self.rounds)
        report: dict[str, Any] = {"store": {}}
        restart = None
        for r, i in enumerate(range(0, len(self.events), per_round)):  # each host's reports, every ROUND_S
            await fault.round(r)
            restart = await self._store_fault(r, report["store"], fault.t0) or restart
            stamp = time.perf_counter_ns()
            for res in await publisher.publish_many(self.events[i:i + per_round]):
                self.published.append((res.pubend, res.tick, stamp))
            if r % QUERY_EVERY_ROUNDS == 0:
                await self._ask(asker, len(self.queries))
            await asyncio.sleep(ROUND_S)
        report["publish_seconds"] = round(time.perf_counter() - fault.t0, 3)
        report["fault"] = await fault.done()
        if restart is not None:
            await restart
        if self.spark is not None:
            await self._punctuate(publisher)
        await publisher.close()
        self.supervisor = supervisor
        report.update(await self._drain(tasks))
        if self.spark_error:
            report["spark_error"] = self.spark_error
        if supervisor is not None and supervisor.done() and supervisor.exception() is not None:
            report["spark_error"] = f"restarting the query failed: {supervisor.exception()}"
        elif supervisor is not None:
            supervisor.cancel()
        await asker.close()
        return report

    async def _supervise(self) -> None:
        """Restart the health query from its checkpoint when it failed, once every broker is up and
        in the overlay again (a replayed micro-batch reads the same pubends' ranges)."""
        while True:
            await asyncio.sleep(SUPERVISE_S)
            if await asyncio.to_thread(self.spark.failed):
                await _until(lambda: len(self.cluster.running) == len(self.cluster.brokers), BROKER_BACK_S)
                await asyncio.to_thread(self.cluster.wait_joined, BROKER_BACK_S)
                if not await asyncio.to_thread(self.spark.restart):
                    return  # RESTARTS_MAX spent  # RESTARTS_MAX spent

    async def _ask(self, asker: Client, n: int) -> None:
        qid = f"q{n:04d}"
        (res,) = await asker.publish_many([(f"pldb/query/{qid}", b"", {"filter": QUERIES[n % len(QUERIES)]})])
        self.queries.append(qid)
        self.asked.append((res.pubend, res.tick))

    async def _punctuate(self, publisher: Client) -> None:
        """One more report once the clock is past the last window's end plus the watermark's delay,
        so that the health query emits its last windows."""
        last_us = self.published[-1][1]
        due_us = last_us - last_us % WINDOW_US + WINDOW_US + jobs.WATERMARK_S * 1_000_000 + PUNCTUATION_MARGIN_US
        await asyncio.sleep(max(0.0, (due_us - time.time_ns() // 1000) / 1e6))
        res = await publisher.publish_many([PUNCTUATION])
        self.published.append((res[0].pubend, res[0].tick, time.perf_counter_ns()))
        self.events.append(PUNCTUATION)

    async def _drain(self, tasks: list[asyncio.Task[None]]) -> dict[str, Any]:
        """Wait (bounded) until every stage has what it should, then stop the collectors."""
        want = self.expected()
        for name, *_, received, _t, _a in self.subs:
            n = len(want["subscribers"][name])
            await _until(lambda r=received, n=n: len(r) >= n, DRAIN_S)
        await _until(lambda: len(self.answers) >= len(self.queries), DRAIN_S)
        out: dict[str, Any] = {}
        if self.spark is not None:
            await _until(lambda: {_window_of(ev) for ev, _ in self.recommendations} >= set(want["windows"])
                         or (self.supervisor is not None and self.supervisor.done()), SPARK_DRAIN_S)
            out["spark_error"] = await asyncio.to_thread(self.spark.stop_query)
            out["micro_batches"] = self.spark.micro_batches()
        journal_want = len(want["properties"]) + len(self.queries) + len(self.recommendations)
        await _until(lambda: _journal_rows(self.store.db) >= journal_want, DRAIN_S)
        for *_, client, _r, task, _a in self.subs:
            task.cancel()
            await client.close()
        for task in tasks:
            task.cancel()
        return out

    def expected(self) -> dict[str, Any]:
        """What each stage should receive, from the published events alone."""
        by_id = list(zip(self.published, self.events, strict=True))
        subscribers = {}
        for name, pattern, flt, *_ in self.subs:
            check = parse_filter(flt) if flt else None
            subscribers[name] = [(p, t) for (p, t, _), (ch, _, attrs) in by_id
                                 if pattern_matches(pattern, ch) and (check is None or check.matches(attrs))]
        properties = [(p, t) for (p, t, _), (ch, _, _) in by_id if pattern_matches(tuple_store.PROPERTIES, ch)]
        loads = [(attrs["site"], t) for (_, t, _), (ch, _, attrs) in by_id
                 if ch.endswith("/load") and attrs["site"] in SITES]
        return {"subscribers": subscribers, "properties": properties,
                "windows": audit.windows(loads, WINDOW_US) if self.spark is not None else {}}


def format_latency(latency_ms: dict[str, float] | None) -> str:
    if not latency_ms:
        return "no deliveries measured"
    return ", ".join(f"{p} {v:.3f} ms" for p, v in latency_ms.items())


def _window_of(ev: Any) -> tuple[str, int]:
    """A recommendation's (site, window start in microseconds), from its attributes."""
    attrs = ev.attributes
    return str(attrs.get("site")), int(attrs.get("window_start_us", -1))


def _micro_batch(ev: Any) -> int:
    """The micro-batch that published a sink's event: its source instance is sink-<batch>-<partition>."""
    parts = ev.instance.split("-")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1


def _journal_rows(db: Path) -> int:
    try:
        return sum(len(tuple_store.journal(db, s)) for s in tuple_store.Stream)
    except sqlite3.Error:
        return 0


def _stage(name: str, got: list[Any], want: list[Any], extra: dict[str, int] | None = None) -> dict[str, Any]:
    return {"name": name, "received": len(got), "expected": len(set(want)), **audit.stream_faults(got, want),
            **(extra or {})}


def _stages(work: _Workload, spark: bool) -> list[dict[str, Any]]:
    """Each stage's stream against what was published (the tuple store's from its own journal)."""
    want = work.expected()
    journal = {s: tuple_store.journal(work.store.db, s) for s in tuple_store.Stream}
    query_ids = {qid: i for i, qid in enumerate(work.queries)}
    answered = [("supervisor", query_ids.get(str(ev.attributes.get("query")), -1)) for ev, _ in work.answers]
    stages = [
        _stage("monitors -> tuple store (journal)",
               [(p, t) for p, t, _, _ in journal[tuple_store.Stream.PROPERTIES]], want["properties"]),
        _stage("queries -> tuple store (journal)", [(p, t) for p, t, _, _ in journal[tuple_store.Stream.QUERIES]],
               work.asked),
        _stage("tuple store answers -> query client", answered, [("supervisor", i) for i in range(len(work.queries))]),
    ]
    if spark:
        got = [_window_of(ev) for ev, _ in work.recommendations]
        counts = {_window_of(ev): int(ev.attributes.get("events", -1)) for ev, _ in work.recommendations}
        miscounted = sum(1 for w, n in want["windows"].items() if w in counts and counts[w] != n)
        stage = _stage("Spark health stream -> sink (read back)", got, list(want["windows"]),
                       {"miscounted": miscounted})
        stage["reordered"] = audit.batch_order_faults([(site, _micro_batch(ev), start) for ev, _ in work.recommendations
                                                       for site, start in [_window_of(ev)]])
        stages.append(stage)
        sink = [(ev.pubend, ev.tick) for ev, _ in work.recommendations]
        stages.append(_stage("recommendations -> tuple store (journal)",
                             [(p, t) for p, t, _, _ in journal[tuple_store.Stream.RECOMMENDATIONS]], sink))
    return stages


def _print_summary(report: dict[str, Any], work: _Workload, stages: list[dict[str, Any]]) -> bool:
    hosts = work.hosts
    print(f"\npublished {len(work.published)} monitor reports at {work.addresses[0]} in {report['publish_seconds']} s, "
          f"in rounds of {2 * hosts} every {ROUND_S * 1000:.0f} ms (each acknowledged after fsync); "
          f"{len(work.queries)} queries on pldb/query/<id>")
    print(f"latency publish -> delivery: {format_latency(report.get('latency_ms'))}")
    fault = report["fault"]
    if fault:
        print(f"broker {fault['broker']} ({fault['role']}, no client) killed with kill -9 "
              f"{fault['killed_s']} s after publishing began, restarted at {fault['restarted_s']} s, "
              f"back in the overlay at {fault['rejoined_s']} s")
    store = report["store"]
    if store:
        print(f"tuple store at {work.store.broker} killed with kill -9 at {store['store_killed_s']} s, "
              f"restarted from its SQLite at {store['restarted_s']} s")
    ok = True
    for s in report["subscribers"]:
        faults = {k: s[k] for k in audit.FAULTS}
        ok &= audit.clean(faults)
        print(f"  {s['name']:<22} at {s['broker']:<16} {s['pattern']:<16} filter={s['filter']!s:<42} "
              f"delivered {s['delivered']}/{s['expected']} "
              + " ".join(f"{k} {v}" for k, v in faults.items())
              + ("  (exactly once, in order)" if audit.clean(faults) else "  MISMATCH"))
    print("pipeline stages, each checked against what was published:")
    for s in stages:
        faults = {k: s[k] for k in (*audit.FAULTS, "miscounted") if k in s}
        good = audit.clean(faults) and not faults.get("miscounted") and s["received"] >= s["expected"] > 0
        ok &= good
        print(f"  {s['name']:<42} received {s['received']}/{s['expected']} "
              + " ".join(f"{k} {v}" for k, v in faults.items())
              + ("  (exactly once, in order)" if good else "  MISMATCH"))
    return ok


def _subscriber_report(work: _Workload) -> tuple[list[dict[str, Any]], dict[str, float]]:
    want = work.expected()["subscribers"]
    sent_at = {(p, t): at for p, t, at in work.published}
    latencies: list[int] = []
    out = []
    for name, pattern, flt, _c, received, _t, at in work.subs:
        got = [(ev.pubend, ev.tick) for ev, _ in received]
        latencies += [arrived - sent_at[(ev.pubend, ev.tick)] for ev, arrived in received
                      if (ev.pubend, ev.tick) in sent_at]
        out.append({"name": name, "pattern": pattern, "filter": flt, "expected": len(want[name]),
                    "broker": at, "delivered": len(got), **audit.stream_faults(got, want[name])})
    return out, _percentiles(latencies)


@contextlib.contextmanager
def _spark_log_to(path: Path) -> Iterator[None]:
    """The data source's driver-side log lines (a micro-batch aborted, ...) go to `path`, beside
    the JVM's, not between the summary's lines."""
    logger = logging.getLogger("tidings.spark")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved
        handler.close()


def _forget_last_run(data: Path) -> None:
    """Each run starts afresh: a new overlay, tuple store, query checkpoint and plots."""
    for name in ("cluster", "health-checkpoint", "plots"):
        shutil.rmtree(data / name, ignore_errors=True)
    for name in ("tuple-store.sqlite", "tuple-store.sqlite-wal", "tuple-store.sqlite-shm"):
        (data / name).unlink(missing_ok=True)


def run_demo(data: Path, hosts: int, rounds: int, spark: bool, brokers: int = 3, spark_session: Any = None) -> int:
    data.mkdir(parents=True, exist_ok=True)
    _forget_last_run(data)
    if not spark:
        print("Spark steps skipped (--no-spark)", flush=True)
    elif spark_session is None:
        problem = spark_problem()
        if problem:
            print(problem, flush=True)
            spark = False
    print(f"starting {brokers} brokers in one overlay, their logs under {data}/cluster ...", flush=True)
    cluster = Cluster(data / "cluster", brokers, http=True).start()
    side = SparkSide(data, spark_session) if spark else None
    store: StoreProcess | None = None
    try:
        print(f"brokers listening on {', '.join(b.address for b in cluster.brokers)}; "
              f"{hosts} monitors x {rounds} rounds x 2 metrics", flush=True)
        print(f"metrics: {', '.join(f'http://{b.http_address}/metrics' for b in cluster.brokers)} "
              f"(and /status); live dashboard: http://{cluster.brokers[0].http_address}/", flush=True)
        _victim, addresses = _plan(cluster)
        db = data / "tuple-store.sqlite"
        store = StoreProcess(addresses[-1], db, data / "tuple-store.log")
        store.start()
        if side is not None:
            print(f"starting Spark (local[2]) and the health stream; Spark's own log: {data / 'spark.log'}", flush=True)
        work = _Workload(cluster, hosts, rounds, store, side)
        with _spark_log_to(data / "spark.log"):
            report = asyncio.run(work.run())
        store.stop()
        report["subscribers"], report["latency_ms"] = _subscriber_report(work)
        stages = _stages(work, work.spark is not None)
        ok = _print_summary(report, work, stages)
        if side is not None:
            print(f"Spark: session and the health query's first micro-batch in {side.started_s:.1f} s, "
                  f"{report.get('micro_batches', 0)} micro-batches (trigger 1 s)"
                  + "".join(f"; restarted from its checkpoint after: {f}" for f in side.failures)
                  + (f"; the query failed: {report['spark_error']}" if report.get("spark_error") else ""))
            ok &= not report.get("spark_error")
            deliveries = [(p, t, r) for p, t, _, r in tuple_store.journal(db, tuple_store.Stream.PROPERTIES)]
            if importlib.util.find_spec("matplotlib") is None:
                print("matplotlib not installed: plots skipped, pip install 'tidings[plot]'")
            else:
                plots = side.plots(addresses[0], deliveries)
                print("plots of the archive (Spark batch job): " + ", ".join(str(p) for p in plots))
    finally:
        if store is not None:
            store.stop()
        if side is not None:
            side.stop()
        cluster.stop()
        print("\nbrokers stopped")
    return 0 if ok else 1
