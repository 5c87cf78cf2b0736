#!/usr/bin/env python3
"""One broker holding many subscriptions over many connections (issue 21: 100,000 over 10,000).

    python bench/scale_subs.py [--connections 10000] [--subs-per-connection 10] [--hosts 1000]
        [--loads 2] [--rate 200] [--rate-s 5] [--full-events 20000] [--full-s 10]
        [--window-deliveries 200000] [--deadline-s 600] [--out bench/results/scale_subs.jsonl]

One tidings broker (its own process, `tidings.testing.BrokerProcess`, data in a fresh directory under
/tmp, 127.0.0.1, `connections_max` raised to the connections plus a few, since the default 10,000
counts the publisher too) and `--loads` load processes (this script again, `--role load`), each an
asyncio loop holding its share of the connections on raw sockets with the harness's own wire code
(ClientSession for HELLO/WELCOME and RENEW, the project's frame and message codecs). Each connection
subscribes `--subs-per-connection` times, all pipelined, on a fixed mix of channels and patterns over
`--hosts` hosts (drawn from a seeded generator, so every process knows every subscription):

    40 %  nodes/<host>/load
    20 %  nodes/<host>/#
    20 %  nodes/+/load       filter host == "<host>"    (the filter index, one table per attribute)
    10 %  nodes/<host>/disk  filter value > 50
    10 %  nodes/+/mem        filter value >= T, T in 96..99

One publisher (in this process, a plain socket) publishes event i on nodes/h<i % hosts>/<metric> with
metric load, mem, disk in turn per round of hosts, attributes {host, value = i * 7919 % 100}, payload
i as 8 bytes: first at a fixed `--rate` for `--rate-s`, then at full speed for `--full-events` events
(or `--full-s`), 100 events per PUBLISH frame; the publisher keeps at most `--window-deliveries`
deliveries ahead of what the loads reported received (closed loop, so no subscriber queue
overflows), and, in the fixed-rate phase, also waits for its ACKs.

Each load checks every delivery as it arrives (the event matches that subscription, and its index is
above the last one the subscription received) and at the end of each phase compares each
subscription's count with the count it computes itself from the events published: nothing lost,
duplicated or out of order, or the script exits 1.

Measured, one JSON line each (printed and appended to `--out`): `admit` (time to admit every
subscription, from the first connect to the last SUBSCRIBED; the broker's RSS then), and per phase
`rate` and `full` (deliveries, deliveries/s, the broker's CPU per delivery and per event, its RSS at
the end, the check). Every line carries the machine's load (loadavg, busy % of every CPU, and the
share not ours) because the machine is shared: read CPU per delivery, not rates.

RLIMIT_NOFILE is raised to the hard limit at start (the broker inherits it); if the hard limit is
below what the connections need, the script says so and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import netutil  # noqa: E402
import tidings_client  # noqa: E402
from tidings.core.session.client_session import ClientSession  # noqa: E402
from tidings.core.wire import decoders, messages  # noqa: E402
from tidings.core.wire.frames import FrameDecoder  # noqa: E402
from tidings.core.wire.types import ClientType  # noqa: E402
from tidings.testing import BrokerProcess  # noqa: E402

METRICS = ("load", "mem", "disk")
KINDS = ("exact", "host-all", "load-filter", "disk-filter", "mem-filter")
KIND_WEIGHTS = (40, 20, 20, 10, 10)
SEED = 21
EVENTS_PER_FRAME = 100
FDS_SPARE = 64  # descriptors beyond the connections: logs, pipes, the publisher
CONNECTS_IN_FLIGHT = 200  # connections handshaking at once per load (the listen backlog is 1024)
PROGRESS_EVERY_S = 0.05


# ---- the workload, known to every process -----------------------------------------------------


def event_of(i: int, hosts: int) -> tuple[str, str, int]:
    """(host, metric, value) of event i."""
    return f"h{i % hosts}", METRICS[(i // hosts) % len(METRICS)], i * 7919 % 100


@dataclass(frozen=True, slots=True)
class Sub:
    kind: str
    host: str
    threshold: int

    def pattern_and_filter(self) -> tuple[str, str | None]:
        if self.kind == "exact":
            return f"nodes/{self.host}/load", None
        if self.kind == "host-all":
            return f"nodes/{self.host}/#", None
        if self.kind == "load-filter":
            return "nodes/+/load", f'host == "{self.host}"'
        if self.kind == "disk-filter":
            return f"nodes/{self.host}/disk", "value > 50"
        return "nodes/+/mem", f"value >= {self.threshold}"

    def matches(self, host: str, metric: str, value: int) -> bool:
        if self.kind in {"exact", "load-filter"}:
            return host == self.host and metric == "load"
        if self.kind == "host-all":
            return host == self.host
        if self.kind == "disk-filter":
            return host == self.host and metric == "disk" and value > 50
        return metric == "mem" and value >= self.threshold


def subscriptions(connections: int, per_connection: int, hosts: int) -> list[list[Sub]]:
    """Every connection's subscriptions (sub ids 1..per_connection), the same in every process."""
    rng = random.Random(SEED)
    out = []
    for _ in range(connections):
        subs = []
        for kind in rng.choices(KINDS, KIND_WEIGHTS, k=per_connection):
            subs.append(Sub(kind, f"h{rng.randrange(hosts)}", rng.randint(96, 99) if kind == "mem-filter" else 0))
        out.append(subs)
    return out


class Expected:
    """Deliveries the events 0..n-1 cause, per subscription, from tallies of the events (one pass over
    the events, one lookup per subscription: no events x subscriptions product)."""

    def __init__(self, hosts: int) -> None:
        self.hosts = hosts
        self.published = 0
        self.per_host_metric: dict[tuple[str, str], int] = {}
        self.disk_over_50: dict[str, int] = {}
        self.mem_at: list[int] = [0] * 100

    def advance(self, n: int) -> None:
        for i in range(self.published, n):
            host, metric, value = event_of(i, self.hosts)
            key = (host, metric)
            self.per_host_metric[key] = self.per_host_metric.get(key, 0) + 1
            if metric == "disk" and value > 50:
                self.disk_over_50[host] = self.disk_over_50.get(host, 0) + 1
            if metric == "mem":
                self.mem_at[value] += 1
        self.published = max(self.published, n)

    def count(self, sub: Sub) -> int:
        if sub.kind in ("exact", "load-filter"):
            return self.per_host_metric.get((sub.host, "load"), 0)
        if sub.kind == "host-all":
            return sum(self.per_host_metric.get((sub.host, m), 0) for m in METRICS)
        if sub.kind == "disk-filter":
            return self.disk_over_50.get(sub.host, 0)
        return sum(self.mem_at[sub.threshold:])


class FanOut:
    """The number of deliveries each event causes, for the publisher's closed loop."""

    def __init__(self, all_subs: list[list[Sub]], hosts: int) -> None:
        self.hosts = hosts
        self.host_metric: dict[tuple[str, str], int] = {}
        self.disk: dict[str, int] = {}
        self.mem_threshold = [0] * 101
        for subs in all_subs:
            for s in subs:
                if s.kind in ("exact", "load-filter"):
                    self._add((s.host, "load"))
                elif s.kind == "host-all":
                    for m in METRICS:
                        self._add((s.host, m))
                elif s.kind == "disk-filter":
                    self.disk[s.host] = self.disk.get(s.host, 0) + 1
                else:
                    self.mem_threshold[s.threshold] += 1
        self.mem_at_least = [sum(self.mem_threshold[: v + 1]) for v in range(100)]

    def _add(self, key: tuple[str, str]) -> None:
        self.host_metric[key] = self.host_metric.get(key, 0) + 1

    def of(self, i: int) -> int:
        host, metric, value = event_of(i, self.hosts)
        n = self.host_metric.get((host, metric), 0)
        if metric == "disk" and value > 50:
            n += self.disk.get(host, 0)
        if metric == "mem":
            n += self.mem_at_least[value]
        return n


# ---- a load process: its connections on one asyncio loop --------------------------------------


class SubscriberProtocol(asyncio.Protocol):
    """One connection: HELLO/WELCOME, its SUBSCRIBEs pipelined, then every EVENTS frame checked."""

    def __init__(self, load: Load, index: int, subs: list[Sub]) -> None:
        self.load, self.index, self.subs = load, index, subs
        self.session = ClientSession("tidings-scale", f"c{index}", None, os.urandom(16))
        self.decoder = FrameDecoder(tidings_client.FRAME_BYTES_MAX)
        self.welcomed = False
        self.subscribed: set[int] = set()
        self.ready = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.last = [-1] * (len(subs) + 1)
        self.counts = [0] * (len(subs) + 1)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.session.hello())

    def connection_lost(self, exc: Exception | None) -> None:
        self.load.problem(f"connection {self.index} closed by the broker: {exc!r}")
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"closed: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        for body in self.decoder.feed(data):
            if self.welcomed and len(body) > 2 and body[1] == ClientType.EVENTS:
                self.events(msgpack.unpackb(body))
            elif not self.welcomed:
                (reply,) = self.session.receive(tidings_client._U32.pack(len(body)) + body)
                if not isinstance(reply, messages.Welcome):
                    self.load.problem(f"connection {self.index}: expected WELCOME, got {reply!r}"[:300])
                    continue
                self.welcomed = True
                assert self.transport is not None
                self.transport.write(b"".join(self.subscribe_frame(n) for n in range(1, len(self.subs) + 1)))
            else:
                self.control(decoders.decode_broker_message(body))

    def subscribe_frame(self, sub: int) -> bytes:
        pattern, flt = self.subs[sub - 1].pattern_and_filter()
        return messages.subscribe(messages.Subscribe(sub, pattern, flt, messages.START_NOW, 0, None))

    def control(self, msg: Any) -> None:
        if isinstance(msg, messages.Subscribed):
            self.subscribed.add(msg.sub)
            if len(self.subscribed) == len(self.subs) and not self.ready.done():
                self.ready.set_result(time.monotonic())
        elif isinstance(msg, messages.Error):
            self.load.problem(f"connection {self.index}: ERROR {msg.code} {msg.message} {msg.context}"[:300])
            if not self.ready.done():
                self.ready.set_exception(ConnectionError(f"{msg.code}: {msg.message}"))

    def events(self, msg: list[Any]) -> None:
        sub, records = msg[1], msg[2]
        spec = self.subs[sub - 1]
        last = self.last[sub]
        hosts = self.load.hosts
        for record in records:
            i = int.from_bytes(record[6], "big")
            if i <= last:
                self.load.bad(f"c{self.index}/{sub}: event {i} after {last} (duplicated or out of order)")
            elif not spec.matches(*event_of(i, hosts)):
                self.load.bad(f"c{self.index}/{sub}: event {i} does not match {spec}")
            last = i
        self.last[sub] = last
        self.counts[sub] += len(records)
        self.load.received += len(records)


class Load:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.hosts = args.hosts
        all_subs = subscriptions(args.connections, args.subs_per_connection, args.hosts)
        self.mine = [(c, all_subs[c]) for c in range(args.load_index, args.connections, args.loads)]
        self.protocols: list[SubscriberProtocol] = []
        self.received = 0
        self.problems: list[str] = []
        self.problems_count = 0
        self.violations: list[str] = []
        self.violations_count = 0

    def problem(self, text: str) -> None:
        self.problems_count += 1
        if len(self.problems) < 10:
            self.problems.append(text)

    def bad(self, text: str) -> None:
        self.violations_count += 1
        if len(self.violations) < 10:
            self.violations.append(text)

    def say(self, **fields: Any) -> None:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    async def connect_one(self, gate: asyncio.Semaphore, index: int, subs: list[Sub]) -> None:
        loop = asyncio.get_running_loop()
        async with gate:
            try:
                _, proto = await loop.create_connection(lambda: SubscriberProtocol(self, index, subs),
                                                        netutil.LOOPBACK, self.args.port)
            except OSError as exc:
                self.problem(f"connection {index}: connect failed: {exc!r}")
                return
            self.protocols.append(proto)
            try:
                await asyncio.wait_for(proto.ready, self.args.deadline_s)
            except (ConnectionError, TimeoutError) as exc:
                self.problem(f"connection {index}: not admitted: {exc!r}"[:300])

    async def run(self) -> None:
        started = time.monotonic()
        gate = asyncio.Semaphore(CONNECTS_IN_FLIGHT)
        renew = asyncio.create_task(self.renew_forever())  # from the first WELCOME: admission may be slow
        await asyncio.gather(*(self.connect_one(gate, c, subs) for c, subs in self.mine))
        admitted = sum(len(p.subscribed) for p in self.protocols)
        self.say(kind="admitted", started=started, finished=time.monotonic(), connections=len(self.protocols),
                 subscriptions=admitted, problems=self.problems, problems_count=self.problems_count)
        commands = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
        reported = -1
        try:
            while True:
                try:
                    line = await asyncio.wait_for(commands.readline(), PROGRESS_EVERY_S)
                except TimeoutError:
                    if self.received != reported:
                        reported = self.received
                        self.say(kind="progress", received=reported)
                    continue
                if not line or line.strip() == b"stop":
                    return
                await self.check(int(line.split()[1]))
        finally:
            renew.cancel()
            for p in self.protocols:
                if p.transport is not None:
                    p.transport.close()

    async def renew_forever(self) -> None:
        """RENEW every welcomed connection's lease each third of it (the broker's, from WELCOME)."""
        every_ns = None
        while every_ns is None:
            await asyncio.sleep(0.1)
            every_ns = next((p.session.renew_interval_ns for p in self.protocols if p.welcomed), None)
        while True:
            await asyncio.sleep(every_ns / 1e9)
            for p in self.protocols:
                if p.welcomed and p.transport is not None and not p.transport.is_closing():
                    p.transport.write(p.session.renew())

    async def check(self, published: int) -> None:
        """Wait (bounded) until every subscription has its expected count for events 0..published-1,
        then report: per subscription, received against expected."""
        expected = Expected(self.hosts)
        expected.advance(published)
        want = [[expected.count(s) for s in p.subs] for p in self.protocols]
        total = sum(map(sum, want))
        deadline = time.monotonic() + self.args.deadline_s
        while self.received < total and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # anything beyond the expected would show as surplus now
        lost = dup = 0
        short: list[str] = []
        for p, counts in zip(self.protocols, want, strict=True):
            for n, count in enumerate(counts, 1):
                got = p.counts[n]
                if got != count:
                    lost += max(0, count - got)
                    dup += max(0, got - count)
                    if len(short) < 10:
                        short.append(f"c{p.index}/{n} {p.subs[n - 1]}: {got} of {count}")
        self.say(kind="check", published=published, expected=total, received=self.received, lost=lost,
                 surplus=dup, violations=self.violations_count, violation_samples=self.violations,
                 mismatches=short, problems=self.problems_count, problem_samples=self.problems)


def run_load(args: argparse.Namespace) -> int:
    raise_nofile(len(range(args.load_index, args.connections, args.loads)) + FDS_SPARE)
    asyncio.run(Load(args).run())
    return 0


# ---- the orchestrator: broker, loads, publisher, measurements ----------------------------------


def raise_nofile(needed: int) -> dict[str, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard == resource.RLIM_INFINITY else max(soft, hard)
    if target != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target != resource.RLIM_INFINITY and target < needed:
        raise SystemExit(f"RLIMIT_NOFILE: the hard limit {hard} is below the {needed} descriptors needed; "
                         f"raise it (ulimit -Hn, limits.conf) or use fewer --connections")
    return {"soft_before": soft, "hard": hard, "now": target}


class LoadProcess:
    """A load process and a thread reading its JSON lines (progress kept, the rest queued)."""

    def __init__(self, args: argparse.Namespace, index: int, port: int) -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--role", "load", "--load-index", str(index),
               "--port", str(port), *args.forward]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.received = 0
        self.lines: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = json.loads(raw)
            with self.cond:
                if line["kind"] == "progress":
                    self.received = line["received"]
                else:
                    self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append({"kind": "exited"})
            self.cond.notify_all()

    def next_line(self, timeout_s: float) -> dict[str, Any]:
        with self.cond:
            if not self.cond.wait_for(lambda: self.lines, timeout_s):
                raise TimeoutError("a load process said nothing in time")
            line = self.lines.pop(0)
        if line["kind"] == "exited":
            raise RuntimeError(f"a load process exited ({self.proc.wait()})")
        return line

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        try:
            self.send("stop")
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)


class Publisher:
    def __init__(self, port: int, hosts: int, fanout: FanOut, loads: list[LoadProcess], window: int) -> None:
        self.conn = tidings_client.TidingsConnection(port, "scale-publisher")
        self.acks = tidings_client.AckCounter()
        self.acked = 0
        self.hosts, self.fanout, self.loads, self.window = hosts, fanout, loads, window
        self.published = 0
        self.seq = 0
        self.expected_deliveries = 0

    def frame(self, count: int) -> bytes:
        events = []
        for i in range(self.published, self.published + count):
            host, metric, value = event_of(i, self.hosts)
            events.append([f"nodes/{host}/{metric}", {"host": host, "value": value}, i.to_bytes(8, "big")])
            self.expected_deliveries += self.fanout.of(i)
        out = messages.publish(self.seq, events)
        self.seq += count
        self.published += count
        return out

    def received(self) -> int:
        return sum(load.received for load in self.loads)

    def read_acks(self, timeout_s: float) -> None:
        if select.select([self.conn.sock], [], [], timeout_s)[0]:
            data = self.conn.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the broker closed the publisher's connection")
            acked, _ = self.acks.feed(data)
            self.acked += acked
        self.conn.renew_lease()

    def publish(self, count: int, per_s: float | None, until: float) -> None:
        """`count` events (or until the monotonic time `until`), at `per_s` or at full speed; the
        deliveries not yet received stay under the window, and so do the events not yet acked."""
        start, end = time.monotonic(), self.published + count
        while self.published < end and time.monotonic() < until:
            if self.expected_deliveries - self.received() > self.window or self.published - self.acked > 20_000:
                self.read_acks(0.002)
                continue
            n = min(EVENTS_PER_FRAME, end - self.published)
            if per_s is not None:
                n = min(n, max(1, int(per_s / 100)))
                due = start + (self.published - (end - count)) / per_s
                if (wait := due - time.monotonic()) > 0:
                    self.read_acks(wait)
                    continue
            self.conn.sock.sendall(self.frame(n))
            self.read_acks(0)
        deadline = time.monotonic() + 60
        while self.acked < self.published and time.monotonic() < deadline:
            self.read_acks(0.05)


    def wait_delivered(self, deadline_s: float) -> None:
        """Until the loads report every delivery the events published cause (or the deadline)."""
        deadline = time.monotonic() + deadline_s
        while self.received() < self.expected_deliveries and time.monotonic() < deadline:
            self.read_acks(0.01)


def machine_state(before: dict[str, list[int]]) -> dict[str, Any]:
    return {"loadavg": [round(x, 2) for x in os.getloadavg()],
            "cpu_busy_pct": {cpu: u["busy_pct"] for cpu, u in netutil.cpu_usage(before, netutil.cpu_times()).items()}}


def broker_memory_mb(pid: int) -> dict[str, float]:
    rss, hwm = netutil.memory_kb([pid])
    return {"rss_mb": round(rss / 1024, 1), "hwm_mb": round(hwm / 1024, 1)}


def emit(out: Path, line: dict[str, Any]) -> None:
    text = json.dumps(line)
    print(text, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(text + "\n")


def checks(loads: list[LoadProcess], published: int, deadline_s: float) -> dict[str, Any]:
    for load in loads:
        load.send(f"check {published}")
    lines = [load.next_line(deadline_s + 30) for load in loads]
    keys = ("expected", "received", "lost", "surplus", "violations", "problems")
    total = {k: sum(x[k] for x in lines) for k in keys}
    total["ok"] = (total["lost"], total["surplus"], total["violations"]) == (0, 0, 0) and \
        total["received"] == total["expected"]
    samples = (s for x in lines for s in x["mismatches"] + x["violation_samples"] + x["problem_samples"])
    total["samples"] = list(samples)[:10]
    return total


def orchestrate(args: argparse.Namespace) -> int:
    limits = raise_nofile(args.connections + FDS_SPARE)
    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    base = {"bench": "scale_subs", "run_id": run_id, "connections": args.connections,
            "subscriptions": args.connections * args.subs_per_connection, "hosts": args.hosts, "loads": args.loads,
            "nofile": limits}
    all_subs = subscriptions(args.connections, args.subs_per_connection, args.hosts)
    fanout = FanOut(all_subs, args.hosts)
    del all_subs
    tmp = Path(tempfile.mkdtemp(prefix="tidings-scale-", dir="/tmp"))
    ok = True
    try:
        with BrokerProcess(tmp / "broker", config={"connections_max": args.connections + FDS_SPARE},
                           log=tmp / "broker.log") as broker:
            assert broker.proc is not None
            pid = broker.proc.pid
            idle = broker_memory_mb(pid)
            cpu0 = netutil.cpu_times()
            loads = [LoadProcess(args, n, broker.port) for n in range(args.loads)]
            try:
                admitted = [load.next_line(args.deadline_s + 60) for load in loads]
                first = min(x["started"] for x in admitted)
                last = max(x["finished"] for x in admitted)
                subs = sum(x["subscriptions"] for x in admitted)
                admit = {**base, "test": "admit", "admitted_subscriptions": subs,
                         "admitted_connections": sum(x["connections"] for x in admitted),
                         "admit_s": round(last - first, 2), "broker_idle_mb": idle,
                         "broker_after_subscribing_mb": broker_memory_mb(pid),
                         "broker_cpu_s": round(netutil.cpu_ticks([pid]) / netutil.CLOCK_TICKS_PER_S, 2),
                         "problems": sum(x["problems_count"] for x in admitted),
                         "problem_samples": [s for x in admitted for s in x["problems"]][:10],
                         **machine_state(cpu0)}
                emit(args.out, admit)
                if subs != base["subscriptions"]:
                    ok = False
                    if subs == 0:
                        return 1
                publisher = Publisher(broker.port, args.hosts, fanout, loads, args.window_deliveries)
                phases = [("rate", args.rate * args.rate_s, float(args.rate), args.rate_s + 30),
                          ("full", args.full_events, None, args.full_s)]
                for name, count, per_s, span_s in phases:
                    cpu_before, ticks0, delivered0 = netutil.cpu_times(), netutil.cpu_ticks([pid]), publisher.received()
                    first_event, t0 = publisher.published, time.monotonic()
                    publisher.publish(count, per_s, t0 + span_s)
                    publisher.wait_delivered(args.deadline_s)
                    elapsed = time.monotonic() - t0  # to the last delivery (as the loads report it, 0.1 s)
                    cpu_s = (netutil.cpu_ticks([pid]) - ticks0) / netutil.CLOCK_TICKS_PER_S
                    check = checks(loads, publisher.published, args.deadline_s)
                    deliveries = check["received"] - delivered0
                    events = publisher.published - first_event
                    line = {**base, "test": name, "events": events, "rate_per_s": per_s,
                            "deliveries": deliveries, "elapsed_s": round(elapsed, 2),
                            "deliveries_per_s": round(deliveries / elapsed) if elapsed else None,
                            "broker_cpu_s": round(cpu_s, 2),
                            "broker_cpu_us_per_delivery": round(1e6 * cpu_s / deliveries, 2) if deliveries else None,
                            "broker_cpu_us_per_event": round(1e6 * cpu_s / events, 1) if events else None,
                            "fanout_mean": round(deliveries / events, 1) if events else None,
                            "broker_end_mb": broker_memory_mb(pid), "check": check, **machine_state(cpu_before)}
                    emit(args.out, line)
                    ok = ok and check["ok"]
                publisher.conn.close()
            finally:
                for load in loads:
                    load.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--subs-per-connection", type=int, default=10)
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--loads", type=int, default=2, help="load processes sharing the connections")
    ap.add_argument("--rate", type=int, default=200, help="events/s of the fixed-rate phase")
    ap.add_argument("--rate-s", type=int, default=5)
    ap.add_argument("--full-events", type=int, default=20_000)
    ap.add_argument("--full-s", type=float, default=60.0, help="the full-speed phase stops publishing after this")
    ap.add_argument("--window-deliveries", type=int, default=200_000)
    ap.add_argument("--deadline-s", type=float, default=600.0, help="bound of every wait")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "scale_subs.jsonl")
    ap.add_argument("--role", choices=("main", "load"), default="main", help=argparse.SUPPRESS)
    ap.add_argument("--load-index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "load":
        return run_load(args)
    args.forward = ["--connections", str(args.connections), "--subs-per-connection", str(args.subs_per_connection),
                    "--hosts", str(args.hosts), "--loads", str(args.loads), "--deadline-s", str(args.deadline_s)]
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
