#!/usr/bin/env python3
"""One benchmark measurement against one running broker; prints one JSON line.

Tests (100-byte payloads; every loop is bounded by a message count and a time limit):

  a          1 publisher -> 1 subscriber, best effort: events delivered per second
  b          1 publisher -> 10 subscribers on one channel: total deliveries per second
  c          durable publishing: events acknowledged as stored per second, with one durable
             subscriber receiving them (tidings: ACK after fsync; MQTT: QoS 1 with persistent
             sessions on both ends; NATS: JetStream file stream, acked publishes, durable push
             consumer with explicit acks)
  d-best     latency at a fixed rate (default 1,000/s), publisher and subscriber in this process
  d-durable  the same over the durable path of test c; also reports publish-to-ack latency

(d) also reports its stalls: reads of deliveries slower than --stall-us (5 ms), merged into episodes,
each with its time in the run, its size and the evidence of who did not run meanwhile (the broker's
and this process's CPU and run-queue wait from /proc/PID/schedstat, steal, the disk's write and
flush time, how late this process sent), and a verdict (bench/stalls.py).

Load shape: a closed loop. The publisher keeps at most `window` events published but not yet
delivered to the slowest subscriber, and in test c at most `ack_window` events not yet acknowledged,
so no broker is measured while it builds an unbounded backlog. The publisher and the subscribers
are separate processes (test b spreads its 10 subscribers over 2 processes); they inherit this
process's CPU affinity, which run.py sets to CPU 1 (`taskset -c 1`) while the broker runs on CPU 0.

  python bench/loads.py --broker mosquitto --proto mqtt --port 1883 --test a --server-pid PID

tidings only: with $TIDINGS_CREDENTIAL (NAME:SECRET) every connection authenticates; with
--tls-ca FILE every connection is TLS (see tidings_client.py).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing as mp
import os
import queue
import resource
import select
import selectors
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mqtt_client  # noqa: E402
import nats_client  # noqa: E402
import netutil  # noqa: E402
import stalls  # noqa: E402

PAYLOAD_BYTES = 100
RECV_BYTES = 1 << 18


# ---- protocol adapters: how to open a publisher and a subscriber for each broker kind ----------


def _no_lease() -> None:
    """The brokers without leases on subscriptions: nothing to renew."""


@dataclass
class Endpoint:
    sock: Any
    parser: Any  # feed(bytes) -> (count, reply bytes or None)
    build: Any = None  # publishers: build(count, payload) -> bytes
    leftover: bytes = b""  # data-path bytes already read during the handshake
    renew: Callable[[], None] = _no_lease  # subscribers: keeps the broker's lease, called in the read loop


class MqttAdapter:
    """Best effort = QoS 0, clean sessions. Durable = QoS 1, persistent sessions (clean_session=0)
    on both ends; the publisher counts PUBACKs, the subscriber PUBACKs every delivery."""

    def __init__(self, port: int, durable: bool, nonce: str, subs: int) -> None:
        self.port, self.durable, self.subs = port, durable, subs
        self.topic = f"bench/{nonce}"
        self.ids = [f"tb-{nonce}-s{i}" for i in range(subs)] + [f"tb-{nonce}-p"]
        self.qos = 1 if durable else 0

    def prepare(self) -> dict[str, Any]:
        if self.durable:
            for cid in self.ids:
                mqtt_client.forget_session(self.port, cid)
        return {"qos": self.qos, "clean_session": not self.durable}

    def subscriber(self, index: int, want_stamps: bool) -> Endpoint:
        conn = mqtt_client.MqttConnection(self.port, self.ids[index], clean=not self.durable)
        granted = conn.subscribe(self.topic, self.qos)
        if granted != self.qos:
            raise ConnectionError(f"asked QoS {self.qos}, granted {granted}")
        if self.qos == 0 and not want_stamps:
            return Endpoint(conn.sock, mqtt_client.Qos0Counter(self.topic, PAYLOAD_BYTES))
        return Endpoint(conn.sock, mqtt_client.PublishParser(want_stamps))

    def publisher(self) -> Endpoint:
        conn = mqtt_client.MqttConnection(self.port, self.ids[-1], clean=not self.durable)
        builder = mqtt_client.PublishBuilder(self.topic, self.qos, PAYLOAD_BYTES)
        acks = mqtt_client.PubackCounter() if self.qos else None
        return Endpoint(conn.sock, acks, builder.build)

    def finish(self) -> None:
        if self.durable:  # leave nothing queued in the broker for the next test
            for cid in self.ids:
                with contextlib.suppress(OSError, ConnectionError):
                    mqtt_client.forget_session(self.port, cid)


class NatsAdapter:
    """Best effort = NATS core. Durable = JetStream: a file-storage stream, publishes with a reply
    inbox (counted when the {"stream","seq"} ack arrives), one durable push consumer per
    subscriber with explicit acks."""

    def __init__(self, port: int, durable: bool, nonce: str, subs: int) -> None:
        self.port, self.durable, self.subs = port, durable, subs
        self.subject = f"bench.{nonce}"
        self.stream = f"TB{nonce.upper()}"
        self.deliver = [f"bench.deliver.{nonce}.{i}" for i in range(subs)]
        self.inbox = f"_INBOX.bench.{nonce}"

    def prepare(self) -> dict[str, Any]:
        if not self.durable:
            return {"jetstream": False}
        nats_client.js_create_stream(self.port, self.stream, self.subject)
        for i, subject in enumerate(self.deliver):
            nats_client.js_create_push_consumer(self.port, self.stream, f"C{i}", subject)
        return {"jetstream": True, "storage": "file", "consumer_ack": "explicit"}

    def subscriber(self, index: int, want_stamps: bool) -> Endpoint:
        conn = nats_client.NatsConnection(self.port, f"bench-sub-{index}")
        if self.durable:
            conn.sub(self.deliver[index], 1)
            return Endpoint(conn.sock, nats_client.MsgParser(ack=True, want_stamps=want_stamps))
        conn.sub(self.subject, 1)
        if want_stamps:
            return Endpoint(conn.sock, nats_client.MsgParser(want_stamps=True))
        return Endpoint(conn.sock, nats_client.MsgCounter(self.subject, 1, PAYLOAD_BYTES))

    def publisher(self) -> Endpoint:
        conn = nats_client.NatsConnection(self.port, "bench-pub")
        if not self.durable:
            return Endpoint(conn.sock, None, nats_client.publish_builder(self.subject, None))
        conn.sub(self.inbox, 1)
        return Endpoint(conn.sock, nats_client.JsPubAckCounter(self.inbox),
                        nats_client.publish_builder(self.subject, self.inbox))

    def finish(self) -> None:
        if self.durable:
            nats_client.js_delete_stream(self.port, self.stream)


class TidingsAdapter:
    """tidings has one path: every event is logged and fsynced before it is acknowledged or
    delivered. Best effort and durable differ only in what the load waits for: durable tests
    window on ACKs, best-effort tests only on deliveries (ACKs are still read and counted).
    With a credential every connection authenticates (SCRAM); with a CA file it is TLS."""

    def __init__(self, port: int, durable: bool, nonce: str, subs: int, credential: str | None = None,
                 tls_ca: str | None = None) -> None:
        self.port, self.durable, self.subs = port, durable, subs
        self.channel = f"bench/{nonce}"
        self.credential, self.tls_ca = credential, tls_ca

    def prepare(self) -> dict[str, Any]:
        return {"ack": "after fsync", "auth": self.credential is not None, "tls": self.tls_ca is not None}

    def _connect(self, instance: str) -> Any:
        import tidings_client

        return tidings_client.TidingsConnection(self.port, instance, self.credential, self.tls_ca)

    def subscriber(self, index: int, want_stamps: bool) -> Endpoint:
        import tidings_client

        conn = self._connect(f"sub-{index}")
        conn.subscribe(1, self.channel)
        return Endpoint(conn.sock, tidings_client.EventsCounter(want_stamps), leftover=conn.leftover(),
                        renew=conn.renew_lease)

    def publisher(self) -> Endpoint:
        import tidings_client

        conn = self._connect("pub")
        builder = tidings_client.PublishBuilder(self.channel)
        return Endpoint(conn.sock, tidings_client.AckCounter(), builder.build, conn.leftover())

    def finish(self) -> None:
        pass


ADAPTERS = {"mqtt": MqttAdapter, "nats": NatsAdapter, "tidings": TidingsAdapter}


def foreign_load(sampler: netutil.ServerSampler, t_from: float, t_to: float | None,
                 client_pct: float) -> dict[str, float | None]:
    """Broker CPU over the measured span, and what else kept the CPUs busy meanwhile."""
    server = sampler.cpu_pct(t_from, t_to)
    machine = sampler.machine_pct(t_from, t_to)
    foreign = None
    if server is not None and machine is not None:
        foreign = round(max(0.0, machine - server - client_pct), 1)
    return {"server_cpu_pct": server, "machine_busy_pct": machine, "foreign_cpu_pct": foreign}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---- throughput: tests a, b, c ------------------------------------------------------------------

# shared control block, indices into a multiprocessing Array of doubles
PUB_DONE, SENT, T_START, T_PUB_END, RELEASE, ACKED = range(6)


@dataclass
class Shared:
    """What the load processes share: queues to report on, the start signal, the per-subscriber
    delivered counts (the publisher's window reads them) and the control block above."""

    ready: Any
    results: Any
    go: Any
    delivered: Any
    ctl: Any


def _subscriber_worker(adapter: Any, indices: list[int], cfg: dict[str, Any], sh: Shared) -> None:
    ready, go, delivered, ctl, results = sh.ready, sh.go, sh.delivered, sh.ctl, sh.results
    try:
        ends = [adapter.subscriber(i, want_stamps=False) for i in indices]
    except Exception as exc:  # reported to the parent, which gives up the run
        ready.put(("error", f"subscriber setup: {exc!r}"))
        return
    ready.put(("ok", None))
    go.wait()
    sel = selectors.DefaultSelector()
    counts = dict.fromkeys(indices, 0)
    for i, end in zip(indices, ends, strict=True):
        sel.register(end.sock, selectors.EVENT_READ, (i, end))
        if end.leftover:
            n, _ = end.parser.feed(end.leftover)
            counts[i] += n
    cpu0 = cpu_seconds()
    t_last = None
    error = None
    hard_stop = time.monotonic() + cfg["duration_s"] + cfg["drain_s"]
    while sel.get_map():
        now = time.monotonic()
        for end in ends:
            end.renew()
        for key, _ in sel.select(timeout=0.05):
            i, end = key.data
            try:
                data = end.sock.recv(RECV_BYTES)
            except OSError as exc:
                data, error = b"", repr(exc)
            if not data:
                error = error or f"subscriber {i}: connection closed by the broker"
                sel.unregister(end.sock)
                continue
            n, reply = end.parser.feed(data)
            if reply:
                end.sock.sendall(reply)
            if n:
                counts[i] += n
                delivered[i] = counts[i]
                t_last = now
        if ctl[PUB_DONE]:
            if all(c >= ctl[SENT] for c in counts.values()):
                break
            if now - max(t_last or 0.0, ctl[T_PUB_END]) > cfg["idle_s"]:
                error = error or "subscriber gave up waiting (idle)"
                break
        if now > hard_stop:
            error = error or "subscriber hit the time limit"
            break
    cpu = cpu_seconds() - cpu0
    errors = [e for e in (getattr(end.parser, "errors", None) for end in ends) if e]
    for end in ends:
        end.sock.close()
    results.put({"kind": "sub", "counts": list(counts.values()), "t_last": t_last, "cpu_s": cpu,
                 "error": error or (repr(errors)[:300] if errors else None)})


def _publisher_worker(adapter: Any, cfg: dict[str, Any], sh: Shared) -> None:
    ready, go, delivered, ctl, results = sh.ready, sh.go, sh.delivered, sh.ctl, sh.results
    try:
        end = adapter.publisher()
    except Exception as exc:
        ready.put(("error", f"publisher setup: {exc!r}"))
        return
    ready.put(("ok", None))
    payload = b"x" * PAYLOAD_BYTES
    count_max, batch = cfg["count"], cfg["batch"]
    window, ack_window = cfg["window"], cfg["ack_window"]
    acks = end.parser
    sock = end.sock
    n_subs = len(delivered)
    go.wait()
    cpu0 = cpu_seconds()
    t0 = time.monotonic()
    ctl[T_START] = t0
    deadline = t0 + cfg["duration_s"]
    sent = acked = 0
    t_last_ack = None
    error = None

    def read_acks(timeout_s: float) -> None:
        nonlocal acked, t_last_ack
        if acks is None:
            if timeout_s:
                time.sleep(timeout_s)
            return
        readable, _, _ = select.select([sock], [], [], timeout_s)
        if not readable:
            return
        data = sock.recv(RECV_BYTES)
        if not data:
            raise ConnectionError("publisher: connection closed by the broker")
        n, reply = acks.feed(data)
        if reply:
            sock.sendall(reply)
        if n:
            acked += n
            ctl[ACKED] = acked
            t_last_ack = time.monotonic()

    try:
        if end.leftover and acks is not None:
            acks.feed(end.leftover)
        while sent < count_max and time.monotonic() < deadline:
            room = min(count_max - sent, batch)
            slowest = min(delivered[:]) if n_subs else sent
            room = min(room, window - (sent - slowest))
            if ack_window:
                room = min(room, ack_window - (sent - acked))
            if room < min(batch, max(1, window // 8)) and sent + room < count_max:
                read_acks(0.0005)  # wait (briefly, bounded) for the window to open
                continue
            sock.sendall(end.build(room, payload))
            sent += room
            ctl[SENT] = sent
            read_acks(0)
        t_end = time.monotonic()
        ctl[T_PUB_END] = t_end
        ctl[PUB_DONE] = 1
        if acks is not None:
            ack_deadline = t_end + cfg["drain_s"]
            while acked < sent and time.monotonic() < ack_deadline:
                read_acks(0.02)
    except (OSError, ConnectionError) as exc:
        error = repr(exc)
        t_end = time.monotonic()
        ctl[T_PUB_END] = t_end
        ctl[PUB_DONE] = 1
    cpu = cpu_seconds() - cpu0
    extra = {k: getattr(acks, k) for k in ("errors", "rejected", "error_samples") if hasattr(acks, k)}
    results.put({"kind": "pub", "sent": sent, "acked": acked if acks is not None else None,
                 "t0": t0, "t_end": t_end, "t_last_ack": t_last_ack, "cpu_s": cpu, "error": error,
                 **extra})
    # Stay connected until the subscribers are done: some brokers drop what a closing
    # publisher has not routed yet.
    stay_until = time.monotonic() + cfg["drain_s"] + cfg["idle_s"]
    try:
        while not ctl[RELEASE] and time.monotonic() < stay_until:
            read_acks(0.05)
    except (OSError, ConnectionError):
        pass
    sock.close()


def run_throughput(adapter: Any, cfg: dict[str, Any],
                   sampler: netutil.ServerSampler | None) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    n_subs = cfg["subs"]
    sh = Shared(ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Array("q", n_subs, lock=False),
                ctx.Array("d", 6, lock=False))
    ready, results, go, ctl = sh.ready, sh.results, sh.go, sh.ctl
    n_procs = min(cfg["sub_procs"], n_subs)
    groups = [list(range(p, n_subs, n_procs)) for p in range(n_procs)]
    procs = [ctx.Process(target=_subscriber_worker,
                         args=(adapter, g, cfg, sh)) for g in groups]
    procs.append(ctx.Process(target=_publisher_worker,
                             args=(adapter, cfg, sh)))
    try:
        for p in procs:
            p.start()
        for _ in procs:
            status, info = ready.get(timeout=60)
            if status == "error":
                raise RuntimeError(info)
        time.sleep(0.2)  # let subscriptions settle in the broker
        if sampler:
            sampler.start()
        before = netutil.cpu_times()
        go.set()
        got: list[dict[str, Any]] = []
        limit = time.monotonic() + cfg["duration_s"] + 2 * cfg["drain_s"] + cfg["idle_s"] + 10
        while len(got) < len(procs) and time.monotonic() < limit:
            with contextlib.suppress(queue.Empty):  # keep waiting until the limit
                got.append(results.get(timeout=0.5))
            if sum(1 for r in got if r["kind"] == "sub") == len(groups):
                ctl[RELEASE] = 1  # every subscriber is done: the publisher may disconnect
        usage = netutil.cpu_usage(before, netutil.cpu_times())
    finally:
        ctl[RELEASE] = 1
        ctl[PUB_DONE] = 1
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
        if sampler:
            sampler.stop()
    pub = next((r for r in got if r["kind"] == "pub"), None)
    subs = [r for r in got if r["kind"] == "sub"]
    if pub is None or len(subs) != len(groups):
        raise RuntimeError(f"load processes did not report (got {len(got)} of {len(procs)})")
    total = sum(sum(r["counts"]) for r in subs)
    t0 = pub["t0"]
    t_last = max((r["t_last"] or 0.0) for r in subs) or None
    expected = pub["sent"] * n_subs
    out: dict[str, Any] = {
        "sent": pub["sent"], "delivered": total, "expected": expected,
        "loss_pct": round(100 * (expected - total) / expected, 3) if expected else None,
        "delivered_per_s": round(total / (t_last - t0)) if t_last and t_last > t0 else 0,
        "publish_s": round(pub["t_end"] - t0, 3),
        "errors": [e for e in [pub["error"], *(r["error"] for r in subs)] if e],
        "cpus": usage,
    }
    t_stop = t_last
    if pub["acked"] is not None:
        out["acked"] = pub["acked"]
        if pub["t_last_ack"]:
            out["acked_per_s"] = round(pub["acked"] / (pub["t_last_ack"] - t0))
        for key in ("errors", "rejected", "error_samples"):
            if pub.get(key):
                out[f"ack_{key}"] = pub[key]
    if cfg["test"] == "c":
        out["value"] = out.get("acked_per_s", 0)
        t_stop = pub["t_last_ack"]
    else:
        out["value"] = out["delivered_per_s"]
    out["unit"] = "events/s"
    span = max(1e-9, (t_stop or time.monotonic()) - t0)
    out["client_cpu_pct"] = round(100 * (pub["cpu_s"] + sum(r["cpu_s"] for r in subs)) / span, 1)
    if sampler:
        out.update(foreign_load(sampler, t0, t_stop, out["client_cpu_pct"]))
    return out


# ---- latency: test d -----------------------------------------------------------------------------


def _percentile(sorted_us: list[float], p: float) -> float | None:
    if not sorted_us:
        return None
    return round(sorted_us[min(len(sorted_us) - 1, int(p / 100 * len(sorted_us)))], 1)


def run_latency(adapter: Any, cfg: dict[str, Any], sampler: netutil.ServerSampler | None) -> dict[str, Any]:
    sub = adapter.subscriber(0, want_stamps=True)
    pub = adapter.publisher()
    if sub.leftover:
        sub.parser.feed(sub.leftover)
    if pub.leftover and pub.parser is not None:
        pub.parser.feed(pub.leftover)
    rate, count, warmup = cfg["rate"], cfg["count"], cfg["warmup"]
    interval_ns = int(1e9 / rate)
    filler = b"x" * (PAYLOAD_BYTES - 8)
    delivery_us: list[float] = []
    ack_us: list[float] = []
    unacked: collections.deque[int] = collections.deque()
    socks = [sub.sock] + ([pub.sock] if pub.parser is not None else [])
    received = sent = 0
    # run.py names its one broker; gd_bench.py's runs cross several and name none (the load's side only)
    server_pid = cfg.get("server_pid", 0)
    watch = stalls.StallWatch(server_pid, cfg.get("data_dir"), cfg.get("stall_us", stalls.THRESHOLD_US))
    switches0 = stalls.context_switches(server_pid) if server_pid else None
    if sampler:
        sampler.start()
    cpu0 = cpu_seconds()
    before = netutil.cpu_times()
    tm0 = time.monotonic()
    deadline = tm0 + count / rate + cfg["drain_s"]
    t_start = time.perf_counter_ns() + 20_000_000
    last_rx = tm0
    while time.monotonic() < deadline:
        now = time.perf_counter_ns()
        due = t_start + sent * interval_ns
        if sent < count and now >= due:
            stamp = time.perf_counter_ns()
            pub.sock.sendall(pub.build(1, stamp.to_bytes(8, "big") + filler))
            watch.sent_late(stamp - due)
            unacked.append(stamp)
            sent += 1
            continue
        if sent >= count and (received >= count or time.monotonic() - last_rx > cfg["idle_s"]):
            break
        timeout = max(0.0, (due - now) / 1e9) if sent < count else 0.05
        sub.renew()
        readable, _, _ = select.select(socks, [], [], timeout)
        for s in readable:
            data = s.recv(RECV_BYTES)
            t_rx = time.perf_counter_ns()
            if not data:
                raise ConnectionError("latency run: connection closed by the broker")
            if s is sub.sock:
                _, reply = sub.parser.feed(data)
                if reply:
                    sub.sock.sendall(reply)
                worst_us = 0.0
                for stamp in sub.parser.stamps:
                    if received >= warmup:
                        delivery_us.append((t_rx - stamp) / 1000)
                        worst_us = max(worst_us, (t_rx - stamp) / 1000)
                    received += 1
                watch.read_done(t_rx, worst_us, len(sub.parser.stamps), len(data), t_rx - t_start)
                sub.parser.stamps.clear()
                last_rx = time.monotonic()
            else:
                n, reply = pub.parser.feed(data)
                if reply:
                    pub.sock.sendall(reply)
                for _ in range(min(n, len(unacked))):
                    stamp = unacked.popleft()
                    if sent - len(unacked) > warmup:
                        ack_us.append((t_rx - stamp) / 1000)
    tm1 = time.monotonic()
    cpu = cpu_seconds() - cpu0
    found_stalls = watch.finish()
    switches = None
    if switches0 is not None and sent:
        vol, invol = stalls.context_switches(server_pid)
        switches = {"voluntary": round((vol - switches0[0]) / sent, 2),
                    "involuntary": round((invol - switches0[1]) / sent, 2)}
    watch.close()
    if sampler:
        sampler.stop()
    usage = netutil.cpu_usage(before, netutil.cpu_times())
    sub.sock.close()
    pub.sock.close()
    delivery_us.sort()
    ack_us.sort()
    out: dict[str, Any] = {
        "sent": sent, "received": received, "measured": len(delivery_us), "rate_per_s": rate,
        "value": _percentile(delivery_us, 50), "unit": "us",
        "p50_us": _percentile(delivery_us, 50), "p90_us": _percentile(delivery_us, 90),
        "p99_us": _percentile(delivery_us, 99), "p999_us": _percentile(delivery_us, 99.9),
        "max_us": round(delivery_us[-1], 1) if delivery_us else None,
        "client_cpu_pct": round(100 * cpu / (tm1 - tm0), 1), "cpus": usage,
        "errors": [] if received >= count else [f"received {received} of {count}"],
        "stalls": found_stalls,
        "server_ctx_switches_per_event": switches,  # the broker's threads, over the whole run
    }
    if ack_us:
        out.update({"ack_p50_us": _percentile(ack_us, 50), "ack_p99_us": _percentile(ack_us, 99)})
    if sampler:
        out.update(foreign_load(sampler, tm0, tm1, out["client_cpu_pct"]))
        if out.get("server_cpu_pct") is not None:  # CPU time: what a busy machine disturbs least
            out["server_cpu_us_per_event"] = round(1e6 * out["server_cpu_pct"] / 100 / rate, 1)
    return out


# ---- command line --------------------------------------------------------------------------------

TEST_DEFAULTS = {
    #         subs durable count      window  ack_window
    "a": (1, False, 3_000_000, 20_000, 0),
    "b": (10, False, 1_000_000, 5_000, 0),
    "c": (1, True, 1_000_000, 1_000, 1_000),
}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    nonce = os.urandom(4).hex()  # fresh names per run: nothing left from an earlier run counts
    latency = args.test.startswith("d")
    durable = args.test in ("c", "d-durable")
    subs = 1 if latency else TEST_DEFAULTS[args.test][0]
    secured = {"credential": args.credential, "tls_ca": args.tls_ca}
    if args.proto != "tidings" and any(secured.values()):
        raise SystemExit("--tls-ca and $TIDINGS_CREDENTIAL are for --proto tidings only")
    adapter = ADAPTERS[args.proto](args.port, durable, nonce, subs,
                                   **(secured if args.proto == "tidings" else {}))
    sampler = netutil.ServerSampler(args.server_pid) if args.server_pid else None
    result: dict[str, Any] = {"broker": args.broker, "test": args.test, "proto": args.proto,
                              "payload_bytes": PAYLOAD_BYTES}
    result.update(adapter.prepare())
    try:
        if latency:
            cfg = {"rate": args.rate, "count": args.latency_count, "warmup": args.warmup,
                   "drain_s": args.drain_s, "idle_s": args.idle_s, "server_pid": args.server_pid,
                   "data_dir": args.data_dir, "stall_us": args.stall_us}
            result.update(run_latency(adapter, cfg, sampler))
        else:
            _, _, count, window, ack_window = TEST_DEFAULTS[args.test]
            cfg = {"test": args.test, "subs": subs, "sub_procs": 2, "duration_s": args.duration_s,
                   "drain_s": args.drain_s, "idle_s": args.idle_s, "count": args.count or count,
                   "window": args.window or window, "ack_window": ack_window, "batch": args.batch}
            result.update({k: cfg[k] for k in ("subs", "window", "ack_window", "batch", "duration_s")})
            result.update(run_throughput(adapter, cfg, sampler))
    finally:
        adapter.finish()
    if sampler:
        result["rss_mb_max"] = round(sampler.rss_kb_max / 1024, 1)
        result["hwm_mb"] = round(sampler.hwm_kb / 1024, 1)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", required=True, help="label written into the result")
    ap.add_argument("--proto", choices=sorted(ADAPTERS), required=True)
    ap.add_argument("--port", type=int, required=True, help="broker port on 127.0.0.1")
    ap.add_argument("--test", choices=["a", "b", "c", "d-best", "d-durable"], required=True)
    ap.add_argument("--server-pid", type=int, default=0, help="broker PID, for its CPU and memory")
    ap.add_argument("--duration-s", type=float, default=5.0, help="publishing time limit")
    ap.add_argument("--drain-s", type=float, default=10.0, help="limit on waiting for the tail")
    ap.add_argument("--idle-s", type=float, default=2.0, help="give up after this long without data")
    ap.add_argument("--count", type=int, default=0, help="event limit (default per test)")
    ap.add_argument("--window", type=int, default=0, help="events in flight (default per test)")
    ap.add_argument("--batch", type=int, default=100, help="events per send (tidings: per PUBLISH)")
    ap.add_argument("--rate", type=float, default=1000.0, help="latency: events per second")
    ap.add_argument("--latency-count", type=int, default=5500, help="latency: events sent")
    ap.add_argument("--warmup", type=int, default=500, help="latency: first events not measured")
    ap.add_argument("--stall-us", type=float, default=stalls.THRESHOLD_US,
                    help="latency: a sample slower than this is a stall, reported with its evidence (stalls.py)")
    ap.add_argument("--data-dir", help="latency: the broker's data directory (its disk's statistics)")
    ap.add_argument("--tls-ca", help="tidings: connect with TLS, the broker's certificate checked "
                    "against this CA file")
    args = ap.parse_args()
    # tidings: authenticate with NAME:SECRET from the environment (kept off the command line)
    args.credential = os.environ.get("TIDINGS_CREDENTIAL") or None
    print(json.dumps(measure(args)), flush=True)


if __name__ == "__main__":
    main()
