#!/usr/bin/env python3
"""Catch-up throughput of a durable subscriber (issue 8's experiment), against NATS JetStream.

  python bench/catchup_bench.py [--events 1000000] [--rounds 1] [--out bench/results/catchup_bench.jsonl]
                                [--profile] [--no-jetstream]

tidings: 2 brokers (`tidings.testing.Cluster`, default configuration). A durable subscriber on
broker 1 subscribes (getting its checkpoint) and goes away; the publisher fills broker 0's log with
--events events of 250 bytes (acked, fsynced); the run waits until broker 1 has heard of them all
(its stream's doubt horizon reaches broker 0's last tick, and with the PFS every record is written:
`settle_s`), as after any absence longer than that; then the subscriber resumes on broker 1 from
its checkpoint and the clock runs until it has counted every event: they come from broker 0's log
through the tree (nacks answered by log reads), as any catch-up after a disconnection does. The
brokers' counters over the catch-up (nacks, records read back, reads that waited for the
retransmission window, peer messages dropped) go with the result.
NATS: one nats-server with JetStream (file storage), a stream filled with the same count by acked
publishes, then a durable push consumer with explicit acks replays it from the start.

Both sides use the lean load clients of bench/loads.py (counting, not decoding, events), so the
brokers are what is measured. Results are JSON lines with the machine's load, and the ratio
tidings / JetStream of the same round. Each tidings result has the CPU per event caught up of both
brokers (`us_per_event`, from /proc's clock ticks: 10 ms each, so use rounds of 200,000 events or
more). --profile runs py-spy (bench/setup.sh's venv) over the subscriber's broker during the
catch-up and prints where its samples went, as bench/pyspy_profile.py folds them; --no-jetstream
leaves out the NATS rounds (an A/B of tidings' CPU alone).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import gd_bench
import loads
import tidings_client
from tidings.testing import Cluster

PAYLOAD = b"c" * loads.PAYLOAD_BYTES
BATCH = 1000
ACK_WINDOW = 20_000
RECV_BYTES = 1 << 20


def fill(end: loads.Endpoint, count: int, limit_s: float) -> float:
    """Publish `count` events through publisher endpoint `end`, at most ACK_WINDOW unacknowledged;
    the seconds it took until the last ack."""
    t0 = time.monotonic()
    sent = acked = 0
    if end.leftover:
        end.parser.feed(end.leftover)
    while acked < count:
        if time.monotonic() - t0 > limit_s:
            raise TimeoutError(f"filling: {acked} of {count} acked after {limit_s} s")
        room = min(BATCH, count - sent, ACK_WINDOW - (sent - acked))
        if room > 0:
            end.sock.sendall(end.build(room, PAYLOAD))
            sent += room
        readable, _, _ = select.select([end.sock], [], [], 0 if room > 0 else 0.05)
        if readable:
            data = end.sock.recv(RECV_BYTES)
            if not data:
                raise ConnectionError("the broker closed the publisher's connection")
            n, reply = end.parser.feed(data)
            if reply:
                end.sock.sendall(reply)
            acked += n
    return time.monotonic() - t0


def drain(end: loads.Endpoint, count: int, limit_s: float) -> tuple[float, int]:
    """Count events on subscriber endpoint `end` until `count`; (seconds, events)."""
    t0 = time.monotonic()
    got = 0
    if end.leftover:
        got += end.parser.feed(end.leftover)[0]
    sel = selectors.DefaultSelector()
    sel.register(end.sock, selectors.EVENT_READ)
    while got < count and time.monotonic() - t0 < limit_s:
        end.renew()
        if not sel.select(timeout=0.1):
            continue
        data = end.sock.recv(RECV_BYTES)
        if not data:
            break
        n, reply = end.parser.feed(data)
        if reply:
            end.sock.sendall(reply)
        got += n
    sel.close()
    return time.monotonic() - t0, got


def settled(cluster: Cluster, origin: Any, home: Any, count: int, pfs: bool) -> bool:
    """`home` knows every tick of `origin`'s log (and, with the PFS, has recorded every event)."""
    mine, theirs = cluster.status(home), cluster.status(origin)
    if mine is None or theirs is None or theirs.get("last_tick") is None:
        return False
    horizons = [s["horizon"] for s in mine["delivery"]["istreams"] if s["pubend"] == theirs["pubend"]]
    return bool(horizons) and horizons[0] >= theirs["last_tick"] and (not pfs or mine["pfs_records_written"] >= count)


def counters(cluster: Cluster, origin: Any, home: Any) -> dict[str, int]:
    """The brokers' counters that tell what a catch-up cost."""
    o, h = cluster.status(origin) or {}, cluster.status(home) or {}
    source = o.get("delivery", {}).get("source", {})
    out = {k: source.get(k, 0) for k in ("nacks_received", "records_read", "reads_parked", "nack_ticks_in_flight")}
    for name, status in (("home", h), ("origin", o)):  # nacks its streams sent, records its stream caches dropped
        out[f"nacks_sent_{name}"] = status.get("delivery", {}).get("nacks_sent", 0)
        out[f"cache_evicted_{name}"] = status.get("delivery", {}).get("cache_records_evicted", 0)
    out["peer_dropped"] = sum(p.get("dropped", 0) for s in (o, h) for p in s.get("peers", []))
    return out


def spy_on(pid: int, raw: str) -> subprocess.Popen[bytes]:
    """py-spy recording every thread of process `pid` into `raw` until it is sent SIGINT."""
    import pyspy_profile
    return subprocess.Popen([pyspy_profile.PY_SPY, "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
                             "--threads", "--native", "--output", raw],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def spy_report(spy: subprocess.Popen[bytes], raw: str) -> dict[str, Any]:
    """Stop `spy`, print its samples folded as bench/pyspy_profile.py does, and return its top rows."""
    import pyspy_profile
    spy.send_signal(signal.SIGINT)
    _, err = spy.communicate(timeout=60)
    if not os.path.exists(raw):
        raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace')[-400:]}")
    found = pyspy_profile.fold(raw)
    total, busy = found["samples"] or 1, found["busy"] or 1
    print(f"\n### subscriber's broker during the catch-up: {found['samples']} samples, {found['busy']} working "
          f"({raw})\n")
    print(pyspy_profile.table("thread (share of all samples)", found["threads"], total) + "\n")
    for title in ("where", "leaf"):
        print(pyspy_profile.table(f"{title} (share of working samples)", found[title], busy) + "\n")
    return {"raw": raw, **{k: [[n, round(c / busy, 4)] for n, c in found[k].most_common(pyspy_profile.TOP)]
                           for k in ("where", "leaf")}}


def tidings_round(count: int, limit_s: float, pfs: bool = True, profile: str | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="catchup-") as tmp, \
            Cluster(Path(tmp), 2, None if pfs else {"durable_pfs": False}) as cluster:
        origin, home = cluster[0], cluster[1]
        away = tidings_client.TidingsConnection(home.port, "catchup-sub")
        checkpoint = away.subscribe(1, "catchup/#", durable=True)
        away.close()
        adapter = loads.TidingsAdapter(origin.port, True, "x", 1)
        adapter.channel = "catchup/x"
        fill_s = fill(adapter.publisher(), count, limit_s)
        t_fill = time.monotonic()
        cluster.wait(lambda: settled(cluster, origin, home, count, pfs), limit_s, "broker 1 to hear of every event")
        settle_s = time.monotonic() - t_fill
        pids = {"origin": origin.pid, "home": home.pid}
        before = counters(cluster, origin, home)
        spy = spy_on(home.pid, profile) if profile else None
        cpu0 = gd_bench.cpu_of(pids)
        back = tidings_client.TidingsConnection(home.port, "catchup-sub")
        t0 = time.monotonic()
        back.subscribe(1, "catchup/#", checkpoint=checkpoint)
        end = loads.Endpoint(back.sock, tidings_client.EventsCounter(), leftover=back.leftover(),
                             renew=back.renew_lease)
        seconds, got = drain(end, count, limit_s)
        seconds = time.monotonic() - t0
        cpu = {k: (v - cpu0[k]) / 100 for k, v in gd_bench.cpu_of(pids).items()}
        after = counters(cluster, origin, home)
        back.close()
        where = {"profile": spy_report(spy, profile)} if spy and profile else {}
    return {"broker": "tidings" if pfs else "tidings-no-pfs", "events": count, "received": got,
            "fill_s": round(fill_s, 2), "settle_s": round(settle_s, 2),
            "catchup_s": round(seconds, 2), "events_per_s": round(got / seconds), "cpu_s": cpu,
            "us_per_event": {k: round(v * 1e6 / max(got, 1), 2) for k, v in cpu.items()},
            "counters": {k: v - before[k] for k, v in after.items()}, **where}


def nats_round(count: int, limit_s: float) -> dict[str, Any]:
    with gd_bench.nats_cluster(1) as procs:
        port = procs[0].port  # type: ignore[attr-defined]
        adapter = loads.NatsAdapter(port, True, gd_bench.nonce(), 1)
        adapter.prepare()  # the stream, and a durable push consumer that waits for interest
        try:
            fill_s = fill(adapter.publisher(), count, limit_s)
            cpu0 = gd_bench.cpu_of({"server": procs[0].pid})
            t0 = time.monotonic()
            seconds, got = drain(adapter.subscriber(0, False), count, limit_s)
            seconds = time.monotonic() - t0
            cpu = {k: (v - cpu0[k]) / 100 for k, v in gd_bench.cpu_of({"server": procs[0].pid}).items()}
        finally:
            adapter.finish()
    return {"broker": "nats-jetstream", "events": count, "received": got, "fill_s": round(fill_s, 2),
            "catchup_s": round(seconds, 2), "events_per_s": round(got / seconds), "cpu_s": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--limit-s", type=float, default=600.0, help="bound on each phase")
    ap.add_argument("--out", default="bench/results/catchup_bench.jsonl")
    ap.add_argument("--no-pfs", action="store_true", help="brokers with durable_pfs = false (catch-up refilters)")
    ap.add_argument("--profile", action="store_true", help="py-spy over the subscriber's broker during the catch-up")
    ap.add_argument("--no-jetstream", action="store_true", help="tidings rounds alone")
    args = ap.parse_args()
    if args.events < 1 or args.rounds < 1:
        ap.error("--events and --rounds are at least 1")
    for _ in range(args.rounds):
        raw = None
        if args.profile:
            import run  # (the bench's work directory: raw profiles go where bench/pyspy_profile.py keeps its own)
            raw = os.path.join(run.WORK, "profiles", f"catchup-{time.strftime('%Y%m%dT%H%M%S')}.txt")
            os.makedirs(os.path.dirname(raw), exist_ok=True)
        t = tidings_round(args.events, args.limit_s, not args.no_pfs, raw) | gd_bench.context()
        results: list[dict[str, Any]] = [t]
        if not args.no_jetstream:
            n = nats_round(args.events, args.limit_s) | gd_bench.context()
            ratio = t["events_per_s"] / n["events_per_s"] if n["events_per_s"] else None
            results += [n, {"test": "catchup-ratio", "tidings_over_jetstream": ratio and round(ratio, 2)}]
        for result in results:
            line = json.dumps({"test": "catchup", **result})
            print(line, flush=True)
            with open(args.out, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
