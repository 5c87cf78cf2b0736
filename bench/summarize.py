#!/usr/bin/env python3
"""Markdown tables from bench/run.py results: median [min-max] over rounds, and tidings/peer ratios.

  python bench/summarize.py bench/results/results.jsonl              # the latest run in the file
  python bench/summarize.py FILE --run-id 20261122T011500,20261122T013000
  python bench/summarize.py FILE --all                                # every line in the file

A ratio is median(tidings) / median(peer): above 1 tidings is faster for throughput, and slower
for latency (where the ratio is of microseconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from typing import Any

from run import FLOOR_BROKERS  # (bench/ is the script's directory: on the path)

DISK = "disk"  # bench/run.py's fsync floor lines (test "fsync")
OVER_FSYNC_P50_US_MAX, OVER_FSYNC_P99_US_MAX = 100, 300  # issue 21's (d) target above the fsync
BROKER_ORDER = ["tidings", "mosquitto", "nats", "amqtt"]
PEERS = ["mosquitto", "nats", "amqtt"]
THROUGHPUT = [("a", "(a) 1→1 best effort, events/s"), ("b", "(b) 1→10 fan-out, deliveries/s"),
              ("c", "(c) durable publish, acked events/s")]
MATCHING_KEYS = ["events_per_s", "matches_per_event", "patterns", "parse_s", "build_s", "index_memory_mb",
                 "brute_events_per_s", "speedup"]
WHAT_IS_DURABLE = {
    "tidings": "ACK after fsync",
    "mosquitto": "QoS 1, persistent sessions (in memory; snapshot every 30 min)",
    "nats": "JetStream file stream, acked publish (no fsync per message)",
    "amqtt": "QoS 1, persistent sessions (in memory only)",
    "tidings-mqtt": "QoS 1, PUBACK after fsync",
    "floor": "QoS 1, write + fsync, then forward and PUBACK (the yardstick: bench/floor_broker.c)",
    "floor-prefilled": "QoS 1, pwrite over zeros + fdatasync, then forward and PUBACK (the yardstick)",
}
WHAT_IS_BEST_EFFORT = {
    "tidings": "the one path (logged + fsynced before delivery)",
    "mosquitto": "QoS 0", "nats": "core NATS", "amqtt": "QoS 0",
    "tidings-mqtt": "QoS 0 on the one path (logged + fsynced before delivery)",
    "floor": "QoS 0, written and fsynced before it is forwarded", "floor-prefilled": "as floor, over zeros",
}


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "\u2013"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e5:
        return f"{x / 1e3:.0f}k"
    if x >= 1e4:
        return f"{x / 1e3:.1f}k"
    if x >= 1e3:
        return f"{x / 1e3:.2f}k"
    return f"{x:.0f}"


def fmt_us(x: float | None) -> str:
    if x is None:
        return "\u2013"
    if x >= 1e6:
        return f"{x / 1e6:.2f} s"
    if x >= 1e4:
        return f"{x / 1e3:.0f} ms"
    if x >= 1e3:
        return f"{x / 1e3:.1f} ms"
    return f"{x:.0f} µs"


def fmt_plain(x: float | None) -> str:
    return "\u2013" if x is None else f"{x:.0f}"


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cell(values: list[float], fmt: Any = fmt_rate, bold: bool = False) -> str:
    if not values:
        return "\u2013"
    m = fmt(median(values))
    m = f"**{m}**" if bold else m
    if len(values) == 1:
        return f"{m} (n=1)"
    return f"{m} [{fmt(min(values))}\u2013{fmt(max(values))}]"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "\u2013"
    r = a / b
    digits = 3 if r < 0.1 else 2 if r < 10 else 0
    return f"{r:.{digits}f}\u00d7"


def above_floor(vals: Any) -> list[str]:
    """tidings' (d) above the disk's fsync in the same round (bench/run.py notes both on each d line),
    against issue 21's target: p50 at most 100 us above the fsync's p50, p99 at most 300 us above its p99;
    the yardsticks' margins beside it, when the run had them (what any broker could reach there)."""
    rows = []
    for broker in ("tidings", *FLOOR_BROKERS):  # (bench/floor_broker.c: what the disk and the sockets allow)
        for test, title in (("d-best", "best effort"), ("d-durable", "durable")):
            p50, p99 = vals(broker, test, "over_fsync_p50_us"), vals(broker, test, "over_fsync_p99_us")
            if not p50:
                continue
            verdict = []
            for name, got, target in (("p50", median(p50), OVER_FSYNC_P50_US_MAX),
                                      ("p99", median(p99), OVER_FSYNC_P99_US_MAX)):
                if got is not None:
                    verdict.append(f"{name} {'within' if got <= target else 'over'} +{target} µs")
            rows.append(f"| {broker} {title} | {cell(p50, fmt_us)} | {cell(p99, fmt_us)} | {'; '.join(verdict)} |")
    if not rows:
        return []
    return ["(d) above the disk's fsync (same round; median [min\u2013max] of the differences):", "",
            "| (d) | p50 - fsync p50 | p99 - fsync p99 | target (issue 21) |", "|---|---|---|---|",
            *rows, ""]


def load(files: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name in files:
        with open(name) as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    return rows


def select_runs(rows: list[dict[str, Any]], run_ids: str | None, take_all: bool) -> list[dict[str, Any]]:
    if take_all:
        return rows
    if run_ids:
        wanted = set(run_ids.split(","))
    else:
        metas = [r["run_id"] for r in rows if r.get("test") == "meta"]
        wanted = {metas[-1]} if metas else set()
    return [r for r in rows if r.get("run_id") in wanted]


def render(rows: list[dict[str, Any]]) -> str:
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("test") in ("meta", None) or r.get("value") is None or r.get("superseded"):
            continue
        by[(r["broker"], r["test"])].append(r)
    brokers = [b for b in BROKER_ORDER if any(k[0] == b for k in by)]
    brokers += sorted({k[0] for k in by} - set(brokers) - {DISK})

    def vals(broker: str, test: str, key: str = "value") -> list[float]:
        return [r[key] for r in by.get((broker, test), []) if r.get(key) is not None]

    out: list[str] = []
    metas = [r for r in rows if r.get("test") == "meta"]
    if metas:
        v = metas[-1].get("versions", {})
        out.append(f"Runs: {', '.join(m['run_id'] for m in metas)}. Versions: Mosquitto "
                   f"`{v.get('mosquitto', '-')}`, NATS `{v.get('nats', '-')}`, amqtt {v.get('amqtt', '-')}, "
                   f"Python {v.get('python', '-')}, Linux {v.get('kernel', '-')}, {v.get('cpus', '-')} CPUs.")
        out.append("")
        for m in metas:
            out.append(f"- `{m.get('command', '')}` ({m['run_id']})")
        out.append("")
    rounds = sorted({r.get("round") for r in rows if r.get("round") is not None})
    out.append(f"Median [min\u2013max] over {len(rounds)} round(s); n = measurements per cell when it is 1.")
    out.append("")

    out.append("### Throughput (100-byte payloads)")
    out.append("")
    out.append("| broker | " + " | ".join(title for _, title in THROUGHPUT) + " |")
    out.append("|---|" + "---|" * len(THROUGHPUT))
    for b in brokers:
        out.append(f"| {b} | " + " | ".join(cell(vals(b, t), bold=True) for t, _ in THROUGHPUT) + " |")
    out.append("")

    out.append("| broker | best effort (a, b, d) means | durable (c, d) means |")
    out.append("|---|---|---|")
    for b in brokers:
        out.append(f"| {b} | {WHAT_IS_BEST_EFFORT.get(b, '?')} | {WHAT_IS_DURABLE.get(b, '?')} |")
    out.append("")

    out.append("### Latency at 1,000 events/s (publisher and subscriber in one process, one clock)")
    out.append("")
    out.append("| broker | best effort p50 | best effort p99 | durable p50 | durable p99 | "
               "durable publish→ack p50 | publish→ack p99 |")
    out.append("|---|---|---|---|---|---|---|")
    for b in brokers:
        out.append(f"| {b} | {cell(vals(b, 'd-best', 'p50_us'), fmt_us, True)} | "
                   f"{cell(vals(b, 'd-best', 'p99_us'), fmt_us)} | "
                   f"{cell(vals(b, 'd-durable', 'p50_us'), fmt_us, True)} | "
                   f"{cell(vals(b, 'd-durable', 'p99_us'), fmt_us)} | "
                   f"{cell(vals(b, 'd-durable', 'ack_p50_us'), fmt_us)} | "
                   f"{cell(vals(b, 'd-durable', 'ack_p99_us'), fmt_us)} |")
    if by.get((DISK, "fsync")):
        p50, p99 = cell(vals(DISK, "fsync", "p50_us"), fmt_us), cell(vals(DISK, "fsync", "p99_us"), fmt_us)
        out.append(f"| disk: write + fsync of one small record (the floor under tidings) | {p50} | {p99} | "
                   f"{p50} | {p99} | {p50} | {p99} |")
    out.append("")
    out.extend(above_floor(vals))

    if "tidings" in brokers:
        out.append("### tidings / peer (ratio of medians)")
        out.append("")
        out.append("Throughput: above 1\u00d7 tidings is faster. Latency: above 1\u00d7 tidings is slower.")
        out.append("")
        out.append("| tidings / peer | (a) 1→1 | (b) 1→10 | (c) durable | (d) best-effort p50 | (d) best-effort p99 "
                   "| (d) durable p50 | (d) durable p99 |")
        out.append("|---|---|---|---|---|---|---|---|")
        pairs = [("tidings", p) for p in brokers if p not in ("tidings", "tidings-mqtt")]
        if "tidings-mqtt" in brokers and "mosquitto" in brokers:
            pairs.append(("tidings-mqtt", "mosquitto"))  # (issue 23: MQTT clients' view, against Mosquitto)
        for ours, p in pairs:
            cells = [ratio(median(vals(ours, t)), median(vals(p, t))) for t, _ in THROUGHPUT]
            for t in ("d-best", "d-durable"):
                for key in ("p50_us", "p99_us"):
                    cells.append(ratio(median(vals(ours, t, key)), median(vals(p, t, key))))
            name = p if ours == "tidings" else f"{ours} / {p}"
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        out.append("")

    out.append("### Resources (medians over rounds)")
    out.append("")
    out.append("Broker CPU in % of one core (the broker is pinned to CPU 0, so 100 % is the ceiling "
               "for a single-threaded broker); load = all client processes (pinned to CPU 1); "
               "foreign = whatever else ran on the machine meanwhile. Peak RSS is VmHWM after "
               "tests (a)\u2013(d) of one round (one broker process per round).")
    out.append("")
    out.append("| broker | (a) broker / load / foreign CPU % | (b) | (c) | (d) best effort | (d) durable "
               "| peak RSS, MB |")
    out.append("|---|---|---|---|---|---|---|")
    for b in brokers:
        cells = []
        for t in ("a", "b", "c", "d-best", "d-durable"):
            cells.append(" / ".join(fmt_plain(median(vals(b, t, k)))
                                    for k in ("server_cpu_pct", "client_cpu_pct", "foreign_cpu_pct")))
        cells.append(cell(vals(b, "mem"), lambda x: f"{x:.0f}"))
        out.append(f"| {b} | " + " | ".join(cells) + " |")
    out.append("")

    losses = [r for r in rows if r.get("loss_pct") not in (None, 0, 0.0)]
    errors = [r for r in rows if r.get("errors")]
    out.append(f"Lines with loss: {len(losses)}; lines with errors: {len(errors)}.")
    for r in (losses + errors)[:10]:
        out.append(f"- r{r.get('round')} {r.get('broker')} {r.get('test')}: loss {r.get('loss_pct')} "
                   f"{str(r.get('errors', ''))[:200]}")
    out.append("")

    matching = [r for r in rows if r.get("test") == "e"]
    if matching:
        out.append("### (e) tidings filter matching (bench/bench_matching.py)")
        out.append("")
        found = {k for r in matching for k, v in (r.get("matching") or {}).items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        keys = [k for k in MATCHING_KEYS if k in found] or sorted(found - {"filters", "events", "seed"})
        out.append("| filters | " + " | ".join(keys) + " |")
        out.append("|---|" + "---|" * len(keys))
        for filters in sorted({r["filters"] for r in matching}):
            rs = [r.get("matching") or {} for r in matching if r["filters"] == filters]
            row = []
            for k in keys:
                xs = [m[k] for m in rs if isinstance(m.get(k), (int, float))]
                row.append(cell(xs, lambda x: f"{x:,.6g}") if xs else "\u2013")
            out.append(f"| {filters:,} | " + " | ".join(row) + " |")
        failed = [r for r in matching if r.get("value") is None]
        if failed:
            out.append("")
            out.append(f"{len(failed)} matching run(s) failed: {str(failed[0].get('errors'))[:200]}")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--run-id", default=None, help="comma-separated run ids (default: the latest run)")
    ap.add_argument("--all", action="store_true", help="use every line of the files")
    args = ap.parse_args()
    print(render(select_runs(load(args.files), args.run_id, args.all)))


if __name__ == "__main__":
    main()
