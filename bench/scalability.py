"""The durable paper's scalability experiment (Gryphon durable, section 5.1, Figure 4): the aggregate
rate a publisher's broker and 1..N subscriber brokers can deliver to durable subscribers, with and
without subscriber disconnections, in the simulator and on real processes.

    python bench/scalability.py [--mode sim|real|both] [--shbs 1,2] [--subscribers 8,24]
        [--real-shbs 1,2] [--real-subscribers 4,12] [--warm-s 2] [--window-s 4]
        [--disconnect-every-s 4] [--away-s 0.067] [--seeds 1,2] [--ns-per-call NS] [--out FILE]
        [--plot docs/img/fig4-scalability.png]
    python bench/scalability.py --report FILE.jsonl [...] [--plot PNG]    # table and plot of recorded lines

Setup (the paper's): one publisher's broker (PHB) at 800 events/s in all, four publishers of 200
events/s each (the paper's 4 pubends; a tidings broker has one pubend, which the four share);
every subscriber broker (SHB) hosts durable subscribers of `nodes/#` with a filter on `host` that
passes a quarter of the events, so each subscriber receives 200 events/s. The PHB is named so that
it is the rendez-vous point of the tree, so SHBs hang off it as in the paper's star.

Peak rate. The paper adds subscribers to each SHB until it saturates. Here each configuration runs
twice, with the two subscriber counts of `--subscribers` (k1, k2) per SHB, and each broker's work
is measured over the window: in the simulator the function calls its core makes (deterministic,
src/tidings/sim/scalability.py) times the CPU nanoseconds per call, measured once at the start of
the sweep (or `--ns-per-call`); on real processes the broker process's CPU (/proc). Per SHB,
utilisation = fixed + k x per-subscriber cost (a line through the two points); the SHB's peak is the
k at utilisation 1 (one core), times the rate each subscriber received. The aggregate peak is the sum
over SHBs, divided by the PHB's utilisation when that passes 1 (then the PHB cannot even publish
800 events/s). "Ratio to linear" is the aggregate over N x the 1-SHB aggregate.

Disconnections: the paper's "every 300 s for 5 s" shortened to `--disconnect-every-s` and
`--away-s` (default 4 s and 0.067 s: the same 1/60 of the time away, 75 times as often), staggered;
each subscriber resumes on its SHB with its checkpoint token.

Every run checks delivery while it measures: in the simulator the overlay-wide checker, on real
processes each subscriber's ticks against the matching events the publisher had acknowledged:
0 lost, 0 duplicated, 0 reordered, or the script exits 1. One JSON line per configuration is appended
to bench/results/scalability.jsonl.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import netutil  # noqa: E402
from durable_experiments import Subscriber  # noqa: E402
from tidings import sync  # noqa: E402
from tidings.sim.scalability import (  # noqa: E402
    EVENTS_PER_S_PER_PUBLISHER,
    HOSTS,
    PUBLISHERS,
    TREE,
    CallMeter,
    CpuMeter,
    ScalabilityScenario,
    identities,
    run_scalability,
)
from tidings.testing import Cluster  # noqa: E402

PAPER = {  # Figure 4, as the text gives it: aggregate events/s to subscribers
    "none": {1: 20_000, 4: 79_200},
    "disconnecting": {1: 17_600, 4: 69_600},
}
PAYLOAD = b"e" * 250  # the paper's application payload
PUBLISH_EVERY_S = 0.01
DRAIN_S = 30.0


def fit_peak(k1: int, u1: float, k2: int, u2: float, rate_per_subscriber: float) -> dict[str, Any]:
    """One SHB's line utilisation = fixed + k x per_subscriber through two runs, and its peak (events/s
    at utilisation 1); None where the measurement shows no cost per subscriber (noise)."""
    per = (u2 - u1) / (k2 - k1)
    fixed = u1 - k1 * per
    peak = (1 - fixed) / per * rate_per_subscriber if per > 0 and fixed < 1 else None
    return {"fixed": round(fixed, 5), "per_subscriber": round(per, 6), "peak": None if peak is None else round(peak)}


def combine(mode: str, disconnect: str, shbs: int, low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """Two runs of one configuration (k1 and k2 subscribers per SHB) -> per-SHB fits, the aggregate peak."""
    k1, k2 = low["subscribers_per_shb"], high["subscribers_per_shb"]
    fits = []
    for b in range(shbs):
        rate = high["delivered_per_s"][b] / k2
        fits.append(fit_peak(k1, low["utilisation"][b + 1], k2, high["utilisation"][b + 1], rate))
    phb = max(low["utilisation"][0], high["utilisation"][0])
    peaks = [f["peak"] for f in fits]
    aggregate = None if None in peaks else round(sum(peaks) / max(1.0, phb))
    return {"test": "fig4-scalability", "mode": mode, "disconnections": disconnect, "shbs": shbs,
            "k": [k1, k2], "fits": fits, "phb_utilisation": round(phb, 4), "aggregate_peak": aggregate,
            "delivered_per_s": [round(sum(low["delivered_per_s"])), round(sum(high["delivered_per_s"]))],
            "forwarders": high.get("forwarders"), "reconnections": [low["reconnections"], high["reconnections"]],
            "problems": low["problems"] + high["problems"], "wall_s": round(low["wall_s"] + high["wall_s"], 1)}


# ---- the simulator -------------------------------------------------------------------------------

def run_sim(args: argparse.Namespace, shbs: int, k: int, disconnect: bool) -> dict[str, Any]:
    """One configuration with a CallMeter per broker: deterministic work (function calls in the
    core), turned into utilisation of one core with the sweep's nanoseconds per call."""
    started = time.monotonic()
    r = run_scalability(_scenario(args, shbs, k, disconnect), CallMeter)
    return {"subscribers_per_shb": k, "delivered_per_s": r.delivered_per_s, "calls_per_s": r.work_per_s,
            "received_per_s": r.received_per_s,
            "utilisation": [c * args.ns_per_call / 1e9 for c in r.work_per_s], "forwarders": r.forwarders,
            "reconnections": r.reconnections, "problems": r.problems, "wall_s": time.monotonic() - started}


def calibrate(args: argparse.Namespace, k: int) -> dict[str, Any]:
    """Nanoseconds of CPU per function call in the core: the 1-SHB configuration once counted (with
    the profiler) and `--calibration-runs` times timed (without it; same seed, so the same work);
    the median of the timed runs' CPU over the counted calls, PHB and SHB together."""
    calls = sum(run_scalability(_scenario(args, 1, k, False), CallMeter).work_per_s)
    cpu = sorted(sum(run_scalability(_scenario(args, 1, k, False),
                                     lambda: CpuMeter(time.thread_time_ns)).work_per_s)
                 for _ in range(args.calibration_runs))
    return {"calls_per_s": round(calls), "cpu_ns_per_s": [round(c) for c in cpu],
            "ns_per_call": round(cpu[len(cpu) // 2] / calls, 2)}


def _scenario(args: argparse.Namespace, shbs: int, k: int, disconnect: bool) -> ScalabilityScenario:
    return ScalabilityScenario(seed=args.seed, shbs=shbs, subscribers_per_shb=k, warm_s=args.warm_s,
                               window_s=args.window_s, away_s=args.away_s,
                               disconnect_every_s=args.disconnect_every_s if disconnect else None)


# ---- real processes ------------------------------------------------------------------------------

def run_real(args: argparse.Namespace, shbs: int, k: int, disconnect: bool) -> dict[str, Any]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fig4-") as tmp, \
            Cluster(Path(tmp), shbs + 1, identities=identities(shbs)) as cluster:
        stop = threading.Event()
        subs = [[Subscriber(cluster[b].address, TREE, stop, filter=f'host == "h{j % HOSTS}"') for j in range(k)]
                for b in range(1, shbs + 1)]
        everyone = [s for here in subs for s in here]
        for s in everyone:
            s.start()
        for s in everyone:
            s.ready.wait(10)
        acked: list[tuple[int, int]] = []  # (tick, host number)
        rate = PUBLISHERS * EVENTS_PER_S_PER_PUBLISHER
        publishing_s = args.warm_s + args.window_s

        def publish() -> None:
            batch = max(1, round(rate * PUBLISH_EVERY_S))
            with sync.connect(cluster[0].address, follow_advice=False) as pub:
                t0, n = time.monotonic(), 0
                while not stop.is_set() and n < rate * publishing_s:
                    due = t0 + n / rate
                    if due > time.monotonic():
                        time.sleep(due - time.monotonic())
                    hosts = [(n + i) % HOSTS for i in range(batch)]
                    results = pub.publish_many([(f"nodes/h{h}/load", PAYLOAD, {"host": f"h{h}"}) for h in hosts])
                    acked.extend((r.tick, h) for r, h in zip(results, hosts, strict=True))
                    n += batch

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        stop.wait(args.warm_s)
        if disconnect:
            rng = random.Random(f"{args.seed}/real")
            now = time.monotonic()
            for s in everyone:
                s.plan_drops(now + rng.uniform(0, args.disconnect_every_s), args.disconnect_every_s, args.away_s,
                             now + args.window_s)
        pids = [netutil.process_tree(b.pid) for b in cluster.brokers]

        def snapshot() -> tuple[list[int], list[int], float, float]:
            return ([netutil.cpu_ticks(p) for p in pids], [sum(len(s.ticks) for s in here) for here in subs],
                    _own_cpu_s(), time.monotonic())

        cpu0, got0, self0, t0 = snapshot()
        stop.wait(args.window_s)
        cpu1, got1, self1, t1 = snapshot()
        publisher.join(DRAIN_S)
        want = {h: [t for t, hh in acked if hh == h] for h in range(HOSTS)}
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline and any(len(s.ticks) < len(want[j % HOSTS])
                                                  for here in subs for j, s in enumerate(here)):
            time.sleep(0.1)
        stop.set()
        for s in everyone:
            s.join(5)
        problems = []
        for b, here in enumerate(subs, 1):
            for j, s in enumerate(here):
                expected = want[j % HOSTS]
                if s.ticks != expected:
                    wanted = set(expected)
                    problems.append(f"SHB {b} subscriber {j}: {len(wanted - set(s.ticks))} missing, "
                                    f"{len(s.ticks) - len(set(s.ticks))} repeated, "
                                    f"{len(set(s.ticks) - wanted)} unexpected, in order {s.ticks == sorted(s.ticks)}")
        span = t1 - t0
        return {"subscribers_per_shb": k,
                "delivered_per_s": [(g1 - g0) / span for g0, g1 in zip(got0, got1, strict=True)],
                "utilisation": [(c1 - c0) / netutil.CLOCK_TICKS_PER_S / span
                                for c0, c1 in zip(cpu0, cpu1, strict=True)],
                "bench_utilisation": round((self1 - self0) / span, 3), "acked": len(acked),
                "reconnections": sum(s.drops for s in everyone), "problems": problems,
                "loadavg": [round(x, 2) for x in os.getloadavg()], "wall_s": time.monotonic() - started}


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---- the report ----------------------------------------------------------------------------------

def summarise(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (mode, disconnections, SHBs): the lines of every seed run for it, their aggregate
    peaks' mean, and the ratio of that mean to N x the 1-SHB mean."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for x in lines:
        groups.setdefault((x["mode"], x["disconnections"], x["shbs"]), []).append(x)
    rows = []
    order = {"sim": 0, "real": 1, "none": 0, "disconnecting": 1}
    for (mode, disc, n), group in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]], kv[0][2])):
        peaks = [x["aggregate_peak"] for x in group if x["aggregate_peak"]]
        rows.append({"mode": mode, "disconnections": disc, "shbs": n, "lines": group,
                     "mean": sum(peaks) / len(peaks) if peaks else None, "peaks": peaks})
    base = {(r["mode"], r["disconnections"]): r["mean"] for r in rows if r["shbs"] == 1}
    for r in rows:
        one = base.get((r["mode"], r["disconnections"]))
        r["ratio"] = r["mean"] / (r["shbs"] * one) if r["mean"] and one else None
    return rows


def table(lines: list[dict[str, Any]]) -> str:
    out = ["| mode | disconnections | SHBs | lines | delivered/s at k2 | PHB util. | per-SHB peak | aggregate peak | "
           "ratio to linear | checked |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summarise(lines):
        group = r["lines"]
        per_shb = [f["peak"] for x in group for f in x["fits"]]
        shown = "-" if None in per_shb else f"{min(per_shb):,}-{max(per_shb):,}"
        agg = "-" if r["mean"] is None else f"{round(r['mean']):,}"
        if len(r["peaks"]) > 1:
            agg += f" ({min(r['peaks']):,}-{max(r['peaks']):,})"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        problems = sum(len(x["problems"]) for x in group)
        ok = "0 lost/dup/reordered" if not problems else f"{problems} problems"
        delivered = sum(x["delivered_per_s"][1] for x in group) / len(group)
        phb = max(x["phb_utilisation"] for x in group)
        out.append(f"| {r['mode']} | {r['disconnections']} | {r['shbs']} | {len(group)} | {round(delivered):,} | "
                   f"{phb:.3f} | {shown} | {agg} | {ratio} | {ok} |")
    return "\n".join(out)


def plot(lines: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    styles = {("sim", "none"): ("tab:blue", "o-"), ("sim", "disconnecting"): ("tab:blue", "s--"),
              ("real", "none"): ("tab:green", "o-"), ("real", "disconnecting"): ("tab:green", "s--")}
    rows = summarise(lines)
    for (mode, disc), (color, style) in styles.items():
        pts = [r for r in rows if r["mode"] == mode and r["disconnections"] == disc and r["mean"]]
        if not pts:
            continue
        xs = [r["shbs"] for r in pts]
        left.errorbar(xs, [r["mean"] / 1000 for r in pts], fmt=style, color=color, capsize=3,
                      yerr=[[(r["mean"] - min(r["peaks"])) / 1000 for r in pts],
                            [(max(r["peaks"]) - r["mean"]) / 1000 for r in pts]],
                      label=f"tidings {mode}, {disc}")
        right.plot(xs, [r["ratio"] if r["ratio"] else float("nan") for r in pts], style, color=color,
                   label=f"tidings {mode}, {disc}")
    for disc, style in (("none", "^-"), ("disconnecting", "v--")):
        xs, ys = zip(*sorted(PAPER[disc].items()), strict=True)
        left.plot(xs, [y / 1000 for y in ys], style, color="tab:red", label=f"paper (Gryphon), {disc}")
        right.plot(xs, [y / (x * ys[0]) for x, y in zip(xs, ys, strict=True)], style, color="tab:red",
                   label=f"paper (Gryphon), {disc}")
    ticks = sorted({x["shbs"] for x in lines} | {1, 4})
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    left.set_yscale("log")
    left.set_xlabel("subscriber brokers")
    left.set_ylabel("aggregate peak rate to subscribers (k events/s)")
    left.legend(fontsize=7)
    right.axhspan(0.9, 1.1, color="0.9")
    right.set_ylim(0.5, max([1.3, *(y + 0.05 for line in right.get_lines() for y in line.get_ydata())]))
    right.set_xlabel("subscriber brokers")
    right.set_ylabel("aggregate / (N x the 1-SHB aggregate)")
    right.set_title("ratio to linear (grey: within 10 %)", fontsize=9)
    left.set_title("peak aggregate rate, 800 events/s in, 200 events/s per subscriber", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["sim", "real", "both"], default="sim")
    ap.add_argument("--shbs", default="1,2", help="subscriber broker counts in the simulator")
    ap.add_argument("--subscribers", default="8,24", help="k1,k2: durable subscribers per SHB, simulator")
    ap.add_argument("--real-shbs", default="1,2", help="subscriber broker counts on real processes")
    ap.add_argument("--real-subscribers", default="4,12", help="k1,k2 per SHB on real processes")
    ap.add_argument("--disconnections", default="none,disconnecting",
                    help="none, disconnecting, or both (comma-separated)")
    ap.add_argument("--warm-s", type=float, default=2.0, help="publishing before the measurement window")
    ap.add_argument("--window-s", type=float, default=4.0, help="the measurement window (seconds; virtual in the sim)")
    ap.add_argument("--disconnect-every-s", type=float, default=4.0, help="the paper: 300")
    ap.add_argument("--away-s", type=float, default=0.067, help="the paper: 5")
    ap.add_argument("--seeds", default="1", help="seeds (comma-separated): each configuration runs once per seed")
    ap.add_argument("--ns-per-call", type=float, default=None,
                    help="CPU ns per function call in the core (default: measured at the start of the sweep)")
    ap.add_argument("--calibration-runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "scalability.jsonl"))
    ap.add_argument("--plot", default=None, help="PNG path (needs matplotlib)")
    ap.add_argument("--report", nargs="+", metavar="JSONL",
                    help="run nothing: the table (and --plot) of the lines in these files")
    args = ap.parse_args()
    if args.report:
        lines = [json.loads(x) for path in args.report for x in Path(path).read_text().splitlines() if x]
        print(table(lines))
        if args.plot:
            plot(lines, args.plot)
        return

    def counts(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x]

    plan: list[tuple[str, list[int], list[int]]] = []
    if args.mode in ("sim", "both"):
        plan.append(("sim", counts(args.shbs), counts(args.subscribers)))
    if args.mode in ("real", "both"):
        plan.append(("real", counts(args.real_shbs), counts(args.real_subscribers)))
    if any(len(ks) != 2 or ks[0] >= ks[1] or ks[0] < 1 for _, _, ks in plan):
        ap.error("--subscribers and --real-subscribers take two counts, k1 < k2")
    lines = []
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    seeds = counts(args.seeds)
    args.seed = seeds[0]
    calibration = None
    if args.mode in ("sim", "both") and args.ns_per_call is None:
        calibration = calibrate(args, counts(args.subscribers)[1])
        args.ns_per_call = calibration["ns_per_call"]
        print(f"calibration: {calibration}", file=sys.stderr, flush=True)
    for mode, shb_counts, (k1, k2) in plan:
        runner = run_sim if mode == "sim" else run_real
        for disc, n, seed in itertools.product(args.disconnections.split(","), shb_counts, seeds):
            args.seed = seed
            low, high = (runner(args, n, k, disc == "disconnecting") for k in (k1, k2))
            line = combine(mode, disc, n, low, high)
            line.update(time=stamp, calibration=calibration if mode == "sim" else None,
                        ns_per_call=args.ns_per_call if mode == "sim" else None, warm_s=args.warm_s,
                        window_s=args.window_s, seed=args.seed, disconnect_every_s=args.disconnect_every_s,
                        away_s=args.away_s, runs=[low, high])
            lines.append(line)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(line) + "\n")
            print(f"{mode} {disc} {n} SHBs seed {args.seed}: aggregate peak {line['aggregate_peak']}, "
                  f"PHB {line['phb_utilisation']}, {len(line['problems'])} problems, {line['wall_s']} s",
                  file=sys.stderr, flush=True)
    print(table(lines))
    for x in lines:
        for p in x["problems"][:5]:
            print(f"{x['mode']} {x['disconnections']} {x['shbs']} SHBs: {p}")
    if args.plot:
        plot(lines, args.plot)
    sys.exit(1 if any(x["problems"] for x in lines) else 0)


if __name__ == "__main__":
    main()
