#!/usr/bin/env python3
"""Guaranteed delivery under failures: the Gryphon paper's failure-injection experiments (§4.2,
Figures 6-8) on a real cluster of broker processes on 127.0.0.1.

  python bench/gd_experiments.py --scenario link|intermediate|publisher [--brokers 10]
         [--rate 100] [--stall-s 2.5] [--down-s S] [--warm-s 5] [--after-s 10]
         [--out bench/results/gd_experiments.jsonl] [--plot docs/img/gd_SCENARIO.png] [--trace FILE]
  python bench/gd_experiments.py --replot FILE --plot PNG      # draw a recorded run's trace again

One publisher at the publisher's broker (PHB) publishes `--rate` events/s (100-byte payloads) on
one tree; every other broker has a subscriber on it. The script picks, from the brokers' own status,
a tree with a forwarder (not the root, not the PHB) that has subscribing children, then injects:

  link          the subscriber's link to its parent, approximated (no per-connection fault injection
                on loopback) by SIGSTOP of the parent for --stall-s (it accepts data, forwards none),
                then kill -9; restarted --down-s later (default 10 s, as the paper's 10 s link outage)
  intermediate  the same stall-then-crash of the forwarder, restarted --down-s later (default 15 s:
                the paper's 30 s halved to keep the run short)
  publisher     kill -9 of the PHB (the publisher cannot publish while it is down), restarted
                --down-s later (default 10 s: the paper's ~20 s halved)

Liveness timers are the short ones of tests/integration/test_cluster_delivery.py (failure detection
in about 1 s); the GD timers are the defaults (GCT 100 ms, NRT 300 ms doubling to 5 s).

Recorded: every delivery (tick = publish time in microseconds, receive time) at every subscriber,
and each broker's `delivery` status (nacks_sent, nack_ticks_sent, retransmissions_sent) every
100 ms. One JSON line per run goes to --out: the tree's shape, latency figures per subscriber, the
recovery time of the affected subscribers, the final cumulative nack ranges per broker, the
exactly-once check (events acknowledged to the publisher against events delivered, per subscriber
that stayed connected: lost, duplicated, out of order), the machine's load average. With --plot (needs
matplotlib, the `plot` extra) a PNG: latency over publish time for the affected subscribers, and
the cumulative nack range over time at the brokers that nacked.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent

from tidings.client.client import Client  # noqa: E402
from tidings.core.errors import TidingsError  # noqa: E402
from tidings.testing import LOCAL_LIVENESS, Cluster  # noqa: E402
from tidings.testing.broker_process import BrokerProcess  # noqa: E402

CONFIG = LOCAL_LIVENESS  # repair in seconds; leaf sets of two, so trees have forwarders
DOWN_S = {"link": 10.0, "intermediate": 15.0, "publisher": 10.0}
CANDIDATES = 8  # trees tried for a forwarder with subscribing children
STATUS_INTERVAL_S = 0.1
PAYLOAD = b"x" * 100
# the `delivery` status counters sampled: nacks sent upstream (count, ticks), knowledge re-sent to
# children after their nacks, and at the pubend's source nacks received and ticks read back from the log
COUNTERS = ("nacks_sent", "nack_ticks_sent", "retransmissions_sent", "source_nacks_received",
            "source_ticks_retransmitted")
DRAIN_S = 30.0  # at most this long for every subscriber to receive the last acknowledged event


@dataclass
class Sub:
    broker: BrokerProcess
    received: list[tuple[int, int]] = field(default_factory=list)  # (tick, receive time in us)
    closed_at: float | None = None


@dataclass
class Run:
    scenario: str
    cluster: Cluster
    phb: BrokerProcess
    prefix: str
    victim: BrokerProcess
    shape: dict[str, Any]
    subs: list[Sub]
    acked: list[int] = field(default_factory=list)  # ticks acknowledged to the publisher
    publish_errors: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)  # status samples
    marks: dict[str, float] = field(default_factory=dict)  # event name -> wall time (s)
    stop: bool = False


def now_us() -> int:
    return time.time_ns() // 1000


def tree_entries(statuses: dict[str, Any], tree: str) -> dict[str, dict[str, Any]]:
    out = {}
    for address, status in statuses.items():
        for t in (status or {}).get("trees", []):
            if t["name"] == tree:
                out[address] = t
    return out


async def collect(sub: Sub, it: Any) -> None:
    try:
        while True:
            batch = await it.next_batch()
            t = now_us()
            sub.received += [(e.tick, t) for e in batch if hasattr(e, "tick")]
    except (TidingsError, OSError, asyncio.CancelledError):
        sub.closed_at = time.time()


async def choose_tree(cluster: Cluster, phb: BrokerProcess, clients: dict[str, Client]
                      ) -> tuple[str, BrokerProcess, dict[str, Any], dict[str, Any]]:
    """Subscribe everywhere but the PHB on a few trees; keep the one whose best forwarder (not the
    root, not the PHB, not broker 0 which restarts without a join address) has most subscribing
    children (a leaf when no tree has such a forwarder).
    Returns (prefix, victim, shape, subscriptions by broker address)."""
    subs: dict[str, dict[str, Any]] = {}
    for i in range(CANDIDATES):
        prefix = f"gdexp{i}"
        for address, client in clients.items():
            subs.setdefault(prefix, {})[address] = await client.subscribe(f"{prefix}/+")
    members = [b for b in cluster.brokers if b is not phb]

    def formed(entries: dict[str, Any]) -> bool:
        return all(b.address in entries and entries[b.address]["member"]
                   and (entries[b.address]["parent"] or "root" in entries[b.address]["role"]) for b in members)

    deadline = time.monotonic() + 60
    best: tuple[int, str, BrokerProcess, dict[str, Any]] | None = None
    while time.monotonic() < deadline:
        statuses = await asyncio.to_thread(cluster.statuses)
        shapes = {p: tree_entries(statuses, f"{p}/#") for p in subs}
        if all(formed(s) for s in shapes.values()):
            for prefix, entries in shapes.items():
                for b in members:
                    e = entries[b.address]
                    if b is cluster.brokers[0] or "root" in e["role"]:
                        continue
                    # a leaf only when no tree has a forwarder (small clusters: the smoke test)
                    kids = len([c for c in e["children"] if c != phb.address]) if e["children"] else -1
                    if best is None or kids > best[0]:
                        best = (kids, prefix, b, entries)
            break
        await asyncio.sleep(0.2)
    if best is None:
        raise RuntimeError(f"no tree among {list(subs)} formed with a forwarder besides its root")
    _, prefix, victim, entries = best
    for other, by_broker in subs.items():
        if other != prefix:
            for s in by_broker.values():
                await s.close()
    return prefix, victim, entries, subs[prefix]


async def publisher(run: Run, rate: float) -> None:
    """`rate` events/s, one at a time on a fixed schedule; reconnects while the PHB is down."""
    channel = f"{run.prefix}/e"
    client: Client | None = None
    pending: set[asyncio.Future[Any]] = set()
    interval = 1.0 / rate
    next_t = time.monotonic()

    def done(fut: asyncio.Future[Any]) -> None:
        pending.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            run.publish_errors += 1
        else:
            run.acked.append(fut.result().tick)

    while not run.stop:
        if client is None:
            try:
                client = await Client.connect(run.phb.address, service="gd-pub", timeout=1.0,
                                                    follow_advice=False)
            except (TidingsError, OSError):
                await asyncio.sleep(0.2)
                continue
        try:
            fut = client.publish(channel, PAYLOAD)
            pending.add(fut)
            fut.add_done_callback(done)
        except (TidingsError, OSError):
            client = None
            continue
        next_t += interval
        await asyncio.sleep(max(0.0, next_t - time.monotonic()))
        if next_t < time.monotonic() - 1.0:  # fell behind (a reconnect): do not burst
            next_t = time.monotonic()
    deadline = time.monotonic() + 10
    while pending and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if client is not None:
        await client.close()


async def sampler(run: Run) -> None:
    """Every broker's cumulative delivery counters every 100 ms; a restarted broker's counters start
    again at 0, so the samples carry the sum over its lives (`base`)."""
    clients: dict[str, Client] = {}
    last: dict[str, dict[str, int]] = {}
    base: dict[str, dict[str, int]] = {}
    keys = COUNTERS

    async def one(b: BrokerProcess) -> None:
        client = clients.get(b.address)
        try:
            if client is None:
                client = clients[b.address] = await Client.connect(b.address, service="gd-status", timeout=0.5,
                                                                             follow_advice=False)
            status = await asyncio.wait_for(client.status(), 0.5)
        except (TidingsError, OSError, TimeoutError):
            if client is not None:
                clients.pop(b.address, None)
                with contextlib.suppress(Exception):
                    await client.close()
            return
        d = status.get("delivery", {})
        prev = last.get(b.address, dict.fromkeys(keys, 0))
        source = d.get("source", {})
        cur = {k: int(d.get(k, source.get(k.removeprefix("source_"), 0))) for k in keys}
        if any(cur[k] < prev[k] for k in keys):  # restarted
            base[b.address] = {k: base.get(b.address, dict.fromkeys(keys, 0))[k] + prev[k] for k in keys}
        last[b.address] = cur
        add = base.get(b.address, dict.fromkeys(keys, 0))
        tree = next((t for t in status.get("trees", []) if t["name"] == f"{run.prefix}/#"), {})
        run.samples.append({"t": time.time(), "broker": b.address, "parent": tree.get("parent"),
                            **{k: cur[k] + add[k] for k in keys}})

    while not run.stop:
        t = time.monotonic()
        await asyncio.gather(*(one(b) for b in run.cluster.brokers if b.running))
        await asyncio.sleep(max(0.0, STATUS_INTERVAL_S - (time.monotonic() - t)))
    for c in clients.values():
        await c.close()


async def inject(run: Run, warm_s: float, stall_s: float, down_s: float, after_s: float) -> None:
    await asyncio.sleep(warm_s)
    victim = run.victim
    assert victim.proc is not None
    if run.scenario != "publisher":
        run.marks["stall"] = time.time()
        victim.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(stall_s)
    run.marks["kill"] = time.time()
    victim.kill()
    await asyncio.sleep(down_s)
    run.marks["restart"] = time.time()
    await asyncio.to_thread(victim.start)
    run.marks["restarted"] = time.time()
    await asyncio.sleep(after_s)
    run.marks["publish_end"] = time.time()
    run.stop = True


def analyse(run: Run, stable: set[str]) -> dict[str, Any]:
    """Latency per subscriber, recovery of the affected ones, exactly-once check.

    An event is late when its latency passes max(100 ms, 5x the subscriber's median before the
    fault). `recovery_s`: from the fault (the stall, or the kill when there is no stall) until the
    last late event published before the restart was received, i.e. until everything the outage
    held back had arrived; `after_restart_ms_max`: the worst latency of events published after the
    restart (the paper's second peak)."""
    acked = sorted(run.acked)
    fault = run.marks.get("stall", run.marks["kill"])
    restart = run.marks["restart"]
    out: dict[str, Any] = {}
    for s in run.subs:
        if s.broker.address not in stable:
            continue
        ticks = [t for t, _ in s.received]
        lat = sorted((r - t) / 1e3 for t, r in s.received)  # ms
        before = sorted((r - t) / 1e3 for t, r in s.received if t / 1e6 < fault)
        base = before[len(before) // 2] if before else None
        limit_ms = max(100.0, 5 * (base or 0))
        late = [r for t, r in s.received if (r - t) / 1e3 > limit_ms and fault <= r / 1e6 and t / 1e6 < restart]
        after = [(r - t) / 1e3 for t, r in s.received if t / 1e6 >= restart]
        got = set(ticks)
        out[s.broker.address] = {
            "received": len(ticks),
            "lost": len([t for t in acked if t not in got]),
            "duplicated": len(ticks) - len(got),
            "out_of_order": sum(1 for a, b in itertools.pairwise(ticks) if b <= a),
            "latency_ms_p50_before": round(base, 2) if base is not None else None,
            "latency_ms_max": round(lat[-1], 1) if lat else None,
            "late_events": len(late),
            "recovery_s": round(max(late) / 1e6 - fault, 2) if late else 0.0,
            "after_restart_ms_max": round(max(after), 1) if after else None,
        }
    return out


def nack_totals(run: Run) -> dict[str, dict[str, int]]:
    """Per broker: the counters at the end, and the nack range sent since the fault (the streams'
    first nacks, for the ticks before the subscriptions' start, come before it)."""
    fault = run.marks.get("stall", run.marks["kill"])
    final: dict[str, dict[str, int]] = {}
    before: dict[str, int] = {}
    for s in run.samples:
        final[s["broker"]] = {k: s[k] for k in COUNTERS}
        if s["t"] < fault:
            before[s["broker"]] = s["nack_ticks_sent"]
    for address, f in final.items():
        f["nack_ticks_since_fault"] = f["nack_ticks_sent"] - before.get(address, 0)
    return final


def parents(run: Run) -> dict[str, list[tuple[float, str | None]]]:
    """Each broker's parent in the tree over the run: (seconds after the fault, parent) changes."""
    fault = run.marks.get("stall", run.marks["kill"])
    out: dict[str, list[tuple[float, str | None]]] = {}
    for smp in run.samples:
        seen = out.setdefault(smp["broker"], [])
        if not seen or seen[-1][1] != smp["parent"]:
            seen.append((round(smp["t"] - fault, 2), smp["parent"]))
    return out


def roles(run: Run) -> dict[str, str]:
    """A short role name per broker address, from the tree's shape before the fault."""
    names: dict[str, str] = {run.phb.address: "PHB"}
    for address, e in run.shape.items():
        if address == run.phb.address:
            continue
        r = "root" if "root" in e["role"] else "forwarder" if e["children"] else "leaf"
        if address == run.victim.address:
            r += " (victim)"
        elif address in run.shape.get(run.victim.address, {}).get("children", []):
            r += ", victim's child"
        names[address] = r
    if run.victim.address == run.phb.address:
        names[run.phb.address] = "PHB (victim)"
    return names


def plot(trace: dict[str, Any], path: str) -> None:
    """The PNG from a run's trace (what --trace writes): latency of the affected subscribers over
    publish time, and the cumulative nack range since the fault of every broker that nacked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    marks, result, names = trace["marks"], trace["result"], trace["result"]["roles"]
    t0 = min(trace["acked"]) / 1e6 if trace["acked"] else marks["kill"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for address in result["affected"]:
        received = trace["received"].get(address, [])
        ax1.plot([t / 1e6 - t0 for t, _ in received], [(r - t) / 1e6 for t, r in received], ".", markersize=2,
                 label=f"subscriber at {address} ({names.get(address)})")
    ax1.set_ylabel("latency (s)")
    ax1.set_title(f"{result['scenario']}: {result['title']}")
    fault = marks.get("stall", marks["kill"])
    base = {smp["broker"]: smp["nack_ticks_sent"] for smp in trace["samples"] if smp["t"] < fault}
    by: dict[str, list[tuple[float, float]]] = {}
    for smp in trace["samples"]:
        if smp["t"] >= fault - 1:
            by.setdefault(smp["broker"], []).append(
                (smp["t"] - t0, max(0, smp["nack_ticks_sent"] - base.get(smp["broker"], 0)) / 1e3))
    styles = iter(["-", "--", ":", "-."] * 4)
    for address, pts in sorted(by.items()):
        if pts[-1][1] > 0:  # equal ranges would hide each other: one line style each
            ax2.step([p[0] for p in pts], [p[1] for p in pts], where="post", linestyle=next(styles),
                     linewidth=1.5, label=f"{address} ({names.get(address, '?')})")
    if not ax2.get_legend_handles_labels()[0]:
        ax2.text(0.5, 0.5, "no broker sent a nack after the fault", ha="center", transform=ax2.transAxes)
    ax2.set_ylabel("cumulative nack range since the fault (ms)")
    ax2.set_xlabel("publish time (s)  [nack range: sample time]")
    for ax in (ax1, ax2):
        for mark, style in (("stall", ":"), ("kill", "--"), ("restart", "-.")):
            if mark in marks:
                ax.axvline(marks[mark] - t0, color="grey", linestyle=style, linewidth=0.8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
    fig.text(0.01, 0.005, f"load average at start {result['loadavg_start']}, end {result['loadavg_end']}; "
             "grey: stall (dotted), kill -9 (dashed), restart (dash-dot)", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def experiment(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    identities = [f"p-gd-exp-{k}" for k in range(args.brokers)]
    loadavg_start = os.getloadavg()
    cluster = Cluster(root, args.brokers, CONFIG, identities=identities)
    await asyncio.to_thread(cluster.start)
    try:
        phb = cluster.brokers[1]
        clients = {b.address: await Client.connect(b.address, service="gd-sub", follow_advice=False)
                   for b in cluster.brokers if b is not phb}
        prefix, victim, shape, chosen = await choose_tree(cluster, phb, clients)
        if args.scenario == "publisher":
            victim = phb
        subs = [Sub(cluster.by_address(a)) for a in chosen]
        run = Run(args.scenario, cluster, phb, prefix, victim, shape, subs)
        tasks = [asyncio.create_task(collect(s, chosen[s.broker.address])) for s in subs]
        down = args.down_s if args.down_s is not None else DOWN_S[args.scenario]
        bg = [asyncio.create_task(publisher(run, args.rate)), asyncio.create_task(sampler(run))]
        await inject(run, args.warm_s, args.stall_s, down, args.after_s)
        await asyncio.gather(*bg)
        # the subscribers that stayed connected should all reach the last acknowledged event
        stable = {s.broker.address for s in subs if s.broker is not victim and s.closed_at is None}
        last = max(run.acked) if run.acked else 0
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline and not all(
                s.received and s.received[-1][0] >= last for s in subs if s.broker.address in stable):
            await asyncio.sleep(0.1)
        for t in tasks:
            t.cancel()
        for c in clients.values():
            with contextlib.suppress(Exception):
                await c.close()
    finally:
        for b in cluster.brokers:
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGCONT)
        await asyncio.to_thread(cluster.stop)
    per_sub = analyse(run, stable)
    victim_children = [c for c in shape.get(victim.address, {}).get("children", []) if c in stable]
    affected = victim_children if args.scenario != "publisher" else sorted(stable)[:2]
    nacks = nack_totals(run)
    names = roles(run)
    parent = shape.get(victim.address, {}).get("parent")
    result: dict[str, Any] = {
        "experiment": "gd-failure", "scenario": args.scenario, "brokers": args.brokers,
        "rate_per_s": args.rate, "payload_bytes": len(PAYLOAD), "stall_s": 0.0 if args.scenario == "publisher"
        else args.stall_s, "down_s": down, "tree": f"{prefix}/#",
        "victim": victim.address, "victim_parent": parent, "victim_children": victim_children,
        "phb": phb.address, "roles": names, "published_acked": len(run.acked), "publish_errors": run.publish_errors,
        "subscribers": per_sub, "affected": affected,
        "recovery_s_max": max((per_sub[a]["recovery_s"] for a in affected if a in per_sub), default=None),
        "nacks": nacks, "parents": parents(run), "config": CONFIG,
        "marks": {k: round(v - (min(run.acked) / 1e6 if run.acked else v), 3) for k, v in run.marks.items()},
        "loadavg_start": [round(x, 2) for x in loadavg_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    children_nack = sum(nacks.get(a, {}).get("nack_ticks_since_fault", 0) for a in victim_children)
    result["nack_ticks_children"] = children_nack
    result["title"] = (f"{args.brokers} brokers, {args.rate:g} events/s; victim {names.get(victim.address)} "
                       f"{victim.address}")
    result["lost_total"] = sum(v["lost"] for v in per_sub.values())
    result["duplicated_total"] = sum(v["duplicated"] for v in per_sub.values())
    result["out_of_order_total"] = sum(v["out_of_order"] for v in per_sub.values())
    trace = {"samples": run.samples, "received": {s.broker.address: s.received for s in subs},
             "acked": run.acked, "marks": run.marks, "result": result}
    if args.plot:
        plot(trace, args.plot)
        result["plot"] = args.plot
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(trace, f)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=sorted(DOWN_S))
    ap.add_argument("--brokers", type=int, default=10)
    ap.add_argument("--rate", type=float, default=100.0, help="events per second, in all")
    ap.add_argument("--warm-s", type=float, default=5.0, help="publishing before the fault")
    ap.add_argument("--stall-s", type=float, default=2.5, help="SIGSTOP before kill -9")
    ap.add_argument("--down-s", type=float, default=None, help="kill -9 to restart (default per scenario)")
    ap.add_argument("--after-s", type=float, default=10.0, help="publishing after the restart")
    ap.add_argument("--out", default=str(HERE / "results" / "gd_experiments.jsonl"))
    ap.add_argument("--plot", default=None, help="PNG path (needs matplotlib)")
    ap.add_argument("--trace", default=None, help="raw samples and deliveries as JSON")
    ap.add_argument("--replot", default=None, help="only draw --plot again from a --trace file")
    args = ap.parse_args()
    if args.replot or not args.scenario:
        if not (args.replot and args.plot):
            ap.error("--scenario is required (or --replot TRACE with --plot PNG)")
        with open(args.replot) as f:
            plot(json.load(f), args.plot)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the cluster on the way out
    with tempfile.TemporaryDirectory(prefix="gd-exp-") as tmp:
        result = asyncio.run(experiment(args, Path(tmp)))
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps({k: result[k] for k in ("scenario", "victim", "affected", "recovery_s_max", "nacks",
                                             "lost_total", "duplicated_total", "out_of_order_total",
                                             "loadavg_start", "loadavg_end")}, indent=1))


if __name__ == "__main__":
    main()
