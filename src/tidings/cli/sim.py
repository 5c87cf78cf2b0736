"""`tidings sim pastry`, `sim delivery` and `sim scribe`: simulator experiments from the command line.

`sim scribe` runs the Scribe paper's experiment (src/tidings/sim/overlay/scribe_experiment.py) and
prints one JSON summary line; `--out` keeps the distributions, `--plot` draws them.

`sim delivery` runs guaranteed-delivery scenarios (src/tidings/sim/delivery_scenario.py): one seed,
or a sweep of seeds as CI runs (`--seeds 1000` for the large sweep on demand; `--seeds 1..100` names
a range); it prints each failing seed with its scenario and problems, and exits 1 if any seed failed.
`--churn` sweeps the scenarios at scale (brokers leaving and joining, loss on every link; `--brokers
1000`). Each seed runs in a forked child, so its CPU time and peak memory are its own; they are
printed per seed with the wall time, and summed up at the end. A seed replays exactly.

Thin: it parses, runs `PastryExperiment` (src/tidings/sim/overlay/experiment.py), and prints a
table (or one JSON object with --json) beside the paper's figures. Progress goes to stderr. Wall
time and peak memory are measured here, around the run: the simulator itself never reads a clock.
`--plot FILE.png` draws our hop distribution against the paper's; matplotlib is imported only then
(the `plot` extra), so the command runs without it.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from typing import Any

from tidings.cli.common import EXIT_BROKER, EXIT_INPUT, CliError


def add_parser(subparsers: Any) -> None:
    """Add `sim pastry ...` to the `tidings` command's subparsers."""
    sim = subparsers.add_parser("sim", help="run a simulation experiment (virtual time, seeded)")
    experiments = sim.add_subparsers(dest="experiment", required=True)
    p = experiments.add_parser("pastry", help="route lookups over a simulated Pastry overlay of N brokers")
    p.add_argument("--nodes", type=int, required=True, help="brokers in the overlay")
    p.add_argument("--seed", type=int, default=1, help="the run's seed (default %(default)s)")
    p.add_argument("--lookups", type=int, default=200_000, help="lookups per phase (default %(default)s)")
    p.add_argument("--model", default="plane",
                   help="network model: plane, sphere or matrix:FILE (n lines of n RTTs in ms; default plane)")
    p.add_argument("--build", choices=["steady", "joins"], default="steady",
                   help="steady: converged state computed directly (default); joins: the join protocol")
    p.add_argument("--fail", type=int, default=0, metavar="K",
                   help="K brokers fail silently after the first phase; route right after and after repair")
    p.add_argument("--settle", type=float, default=30.0, metavar="SECONDS",
                   help="virtual seconds from the failures to the after-repair phase (default %(default)s)")
    p.add_argument("--loss", type=float, default=0.0, help="message loss probability (default 0)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the hop distribution beside the paper's")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_sim_pastry)
    d = experiments.add_parser("delivery", help="guaranteed-delivery scenarios under faults, checked end to end")
    d.add_argument("--seed", type=int, default=0, help="the first seed (default %(default)s)")
    d.add_argument("--seeds", default="1", metavar="N|A..B",
                   help="how many seeds from --seed, or the range A..B (default %(default)s)")
    d.add_argument("--brokers", type=int, default=24, help="brokers per scenario (default %(default)s)")
    d.add_argument("--churn", action="store_true",
                   help="the sweep at scale: brokers crash, leave and join, loss on links (with --brokers 1000)")
    d.add_argument("--quiet", action="store_true", help="no line per passing seed")
    d.set_defaults(func=cmd_sim_delivery)
    s = experiments.add_parser("scribe",
                               help="the Scribe paper's groups on a transit-stub Internet, beside IP multicast")
    s.add_argument("--nodes", type=int, required=True, help="brokers (end nodes of the topology)")
    s.add_argument("--groups", type=int, default=1500,
                   help="groups; rank r has about N*r^-1.25 members (default %(default)s)")
    s.add_argument("--seed", type=int, default=1, help="the run's seed (default %(default)s)")
    s.add_argument("--children-max", type=int, metavar="K",
                   help="Scribe's children_per_tree_max (default: unbounded, as the paper's Scribe)")
    s.add_argument("--out", metavar="FILE.json", help="write the summary and every distribution to FILE.json")
    s.add_argument("--plot", metavar="PREFIX",
                   help="draw PREFIX-delay.png, PREFIX-node-stress.png and PREFIX-link-stress.png")
    s.add_argument("--quiet", action="store_true", help="no progress on stderr")
    s.set_defaults(func=cmd_sim_scribe)
    r = experiments.add_parser("routing", help="PsEPR's routing strategies and Scribe on one PLDB-like workload")
    r.add_argument("--brokers", type=int, required=True, help="brokers (end nodes of the topology)")
    r.add_argument("--seed", type=int, default=1, help="the run's seed (default %(default)s)")
    r.add_argument("--channels", type=int, default=500, help="monitored hosts, one channel each (default %(default)s)")
    r.add_argument("--subscribers-max", type=int, default=5,
                   help="subscribing brokers per channel, 1 to this (default %(default)s)")
    r.add_argument("--no-archive", action="store_true", help="no tuple-store broker subscribed to every channel")
    r.add_argument("--churn", type=int, default=50,
                   help="brokers that fail, and as many that join (default %(default)s)")
    r.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    r.add_argument("--plot", metavar="FILE.png", help="draw the strategies side by side")
    r.set_defaults(func=cmd_sim_routing)


def parse_seeds(first: int, spec: str) -> range:
    """`--seeds N` (N seeds from `first`) or `--seeds A..B` (A to B, both included)."""
    try:
        if ".." in spec:
            a, b = spec.split("..", 1)
            seeds = range(int(a), int(b) + 1)
        else:
            seeds = range(first, first + int(spec))
    except ValueError:
        raise CliError(f"--seeds takes a count N or a range A..B, not {spec!r}", EXIT_INPUT) from None
    if len(seeds) < 1:
        raise CliError("--seeds must name at least one seed", EXIT_INPUT)
    return seeds


def run_delivery_seed(seed: int, brokers: int, churn: bool) -> dict[str, Any]:
    """One seed of the sweep (in a forked child): its outcome, CPU time and peak resident set."""
    from tidings.sim.delivery_scenario import churn_scenario, run_delivery, sweep_scenario

    scenario = churn_scenario(seed, brokers) if churn else sweep_scenario(seed, brokers)
    result = run_delivery(scenario)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"seed": seed, "scenario": repr(scenario), "problems": result.problems, "acked": result.acked,
            "delivered": result.delivered, "faults": result.faults_done,
            "records_unwanted": result.stats.get("records_unwanted", 0),
            "complete_after_s": result.stats.get("complete_after_s"),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024)}


def cmd_sim_delivery(args: argparse.Namespace) -> int:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    seeds = parse_seeds(args.seed, args.seeds)
    if args.brokers < 4:
        raise CliError("--brokers must be at least 4", EXIT_INPUT)
    started = time.monotonic()
    failed = 0
    cpu: list[float] = []
    walls: list[float] = []
    peak = 0
    fork = multiprocessing.get_context("fork")
    for seed in seeds:  # one child per seed: its ru_maxrss is that seed's own peak
        seed_started = time.monotonic()
        with ProcessPoolExecutor(1, mp_context=fork) as pool:
            r = pool.submit(run_delivery_seed, seed, args.brokers, args.churn).result()
        wall = time.monotonic() - seed_started
        cpu.append(r["cpu_s"])
        walls.append(wall)
        peak = max(peak, r["peak_rss_mib"])
        cost = f"{r['cpu_s']:.1f} s CPU, {wall:.0f} s wall, peak {r['peak_rss_mib']} MiB"
        if r["complete_after_s"] is not None:  # the churn sweep's quiet: when every subscriber had it all
            cost = f"complete {r['complete_after_s']} virtual s after publishing; {cost}"
        if r["problems"]:
            failed += 1
            print(f"seed {seed}: FAILED ({cost}) {r['scenario']} {r['faults']}")
            for problem in r["problems"]:
                print(f"  {problem}")
        elif not args.quiet:
            print(f"seed {seed}: ok, {r['acked']} acknowledged, {r['delivered']} delivered, "
                  f"{r['records_unwanted']} records to brokers that did not want them, "
                  f"faults {r['faults'] or 'none'} ({cost})")
        sys.stdout.flush()
    print(f"{len(seeds) - failed} passed, {failed} failed ({time.monotonic() - started:.0f} s; per seed "
          f"CPU mean {sum(cpu) / len(cpu):.1f} s, max {max(cpu):.1f} s; wall mean {sum(walls) / len(walls):.0f} s; "
          f"peak memory max {peak} MiB)")
    return 1 if failed else 0


def cmd_sim_scribe(args: argparse.Namespace) -> int:
    from tidings.sim.overlay.scribe_experiment import ScribeExperiment

    try:
        experiment = ScribeExperiment(args.nodes, args.groups, args.seed, children_max=args.children_max)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    started = time.monotonic()
    phases: dict[str, float] = {}
    show = None if args.quiet else _progress(started)

    def progress(phase: str, done: int, total: int) -> None:
        if done == total:
            phases[phase] = round(time.monotonic() - started - sum(phases.values()), 1)
        if show is not None:
            show(phase, done, total)

    summary, distributions = experiment.run(progress)
    summary["phases_wall_s"] = phases
    summary["wall_s"] = round(time.monotonic() - started, 1)
    summary["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "distributions": distributions}, f, separators=(",", ":"))
    if args.plot:
        plot_scribe(summary, distributions, args.plot)
    sys.stdout.write(json.dumps(summary, separators=(",", ":")) + "\n")
    return 1 if summary["members_missed"] or summary["duplicates"] else 0


def cmd_sim_routing(args: argparse.Namespace) -> int:
    from tidings.sim.overlay.routing_strategies import RoutingExperiment

    try:
        experiment = RoutingExperiment(args.brokers, args.seed, channels=args.channels,
                                       subscribers_max=args.subscribers_max, archive=not args.no_archive,
                                       churn=args.churn)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    started = time.monotonic()
    report = experiment.run()
    _emit(report, started, args, plot_routing, format_routing)
    return 0


ROUTING_COLUMNS = (
    ("messages_per_event", "messages/event", "{:.1f}"), ("delay_ms_mean", "delay ms", "{:.0f}"),
    ("stretch_mean", "stretch", "{:.2f}"), ("stretch_p90", "stretch p90", "{:.2f}"),
    ("state_mean", "state/broker", "{:.1f}"), ("state_max", "state max", "{}"),
    ("build_messages", "build msgs", "{:,}"), ("delivered_right_after", "reached after churn", "{:.1%}"),
    ("repair_messages", "repair msgs", "{:,}"), ("delivered_after_repair", "reached after repair", "{:.1%}"),
)


def format_routing(report: dict[str, Any]) -> str:
    lines = [f"routing: {report['brokers']} brokers, {report['channels']} channels, {report['subscriptions']} "
             f"subscriptions, {report['churn']} fail and {report['churn']} join, seed {report['seed']}"]
    names = list(report["strategies"])
    lines.append(f"  {'':<22}" + "".join(f"{n:>18}" for n in names))
    for key, label, fmt in ROUTING_COLUMNS:
        cells = "".join(f"{fmt.format(report['strategies'][n][key]):>18}" for n in names)
        lines.append(f"  {label:<22}{cells}")
    for name in names:
        if report["strategies"][name]["extra"]:
            lines.append(f"  {name}: {report['strategies'][name]['extra']}")
    lines.append(f"  wall {report['wall_s']} s, peak RSS {report['peak_rss_mib']} MiB")
    return "\n".join(lines) + "\n"


def plot_routing(report: dict[str, Any], path: str) -> None:
    """Six panels, the strategies side by side: messages per event, stretch, state, build cost,
    delivery right after churn, repair cost."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("tidings: --plot needs matplotlib (pip install 'tidings[plot]')\n")
        return
    names = list(report["strategies"])
    panels = (("messages_per_event", "messages per event", True), ("stretch_mean", "delay / direct delay", False),
              ("state_mean", "state per broker (mean)", True), ("build_messages", "build messages", True),
              ("delivered_right_after", "reached right after churn", False),
              ("repair_messages", "repair messages after churn", True))
    fig, axes = plt.subplots(2, 3, figsize=(12, 7))
    for ax, (key, title, log) in zip(axes.flat, panels, strict=True):
        ax.bar(range(len(names)), [report["strategies"][n][key] for n in names],
               color=["#999999", "#1f77b4", "#2ca02c", "#d62728"])
        ax.set_xticks(range(len(names)), [n.replace("-", "\n") for n in names], fontsize=8)
        ax.set_title(title, fontsize=10)
        if log:
            ax.set_yscale("log")
    fig.suptitle(f"{report['brokers']:,} brokers, {report['channels']} channels, {report['churn']} fail and join")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cmd_sim_pastry(args: argparse.Namespace) -> int:
    from tidings.core.units import SECOND_NS
    from tidings.sim.overlay.experiment import PastryExperiment
    from tidings.sim.overlay.topology import TopologyError

    try:
        experiment = PastryExperiment(args.nodes, args.seed, lookups=args.lookups, model=args.model,
                                      build=args.build, fail=args.fail, settle_ns=int(args.settle * SECOND_NS),
                                      loss_probability=args.loss)
        started = time.monotonic()
        report = experiment.run(progress=None if args.quiet else _progress(started))
    except (ValueError, TopologyError) as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    except RuntimeError as exc:  # the overlay could not be built
        raise CliError(str(exc), EXIT_BROKER) from None
    _emit(report, started, args, plot_hops, format_report)
    wrong = sum(phase["wrong"] + phase["lost"] for phase in report["phases"].values())
    return 1 if wrong else 0


def _emit(report: dict[str, Any], started: float, args: argparse.Namespace, plot: Any, text: Any) -> None:
    """An experiment's report with its cost (wall time, peak RSS), plotted if asked, then printed
    as one JSON line (--json) or as text."""
    report["wall_s"] = round(time.monotonic() - started, 1)
    report["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if args.plot:
        plot(report, args.plot)
    if args.json:
        sys.stdout.write(json.dumps(report, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(text(report))


def _progress(started: float) -> Any:
    last = [0.0]

    def show(phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 2.0 or done == total:
            last[0] = now
            sys.stderr.write(f"[{now - started:7.1f}s] {phase}: {done}/{total}\n")

    return show


def format_report(report: dict[str, Any]) -> str:
    from tidings.sim.overlay.experiment import PAPER_FAILURES_5K, PAPER_HOPS_100K

    lines = [f"pastry: {report['nodes']} brokers, model {report['model']}, build {report['build']}, "
             f"seed {report['seed']}, {report['lookups_per_phase']} lookups per phase"]
    for name, phase in report["phases"].items():
        lines.append(f"  {name:<13} mean {phase['mean_hops']:.3f} hops (with detours "
                     f"{phase['mean_hops_with_detours']:.3f}), max {phase['max_hops']}, "
                     f"not at the closest live node {phase['wrong']}, lost {phase['lost']}")
        dist = "  ".join(f"{h}:{p:.2f}%" for h, p in phase["hops_percent"].items())
        lines.append(f"  {'':<13} hops {dist}")
    paper = PAPER_HOPS_100K["percent"]
    lines.append(f"  paper (N=100,000): mean {PAPER_HOPS_100K['mean']}, max {PAPER_HOPS_100K['max']}, hops "
                 + "  ".join(f"{h}:{p:.2f}%" for h, p in paper.items()))
    if "right_after" in report["phases"]:
        lines.append(f"  paper (N=5,000, 500 failed): before {PAPER_FAILURES_5K['before']}, right after "
                     f"{PAPER_FAILURES_5K['right_after']}, after repair {PAPER_FAILURES_5K['after_repair']}")
    lines.append(f"  leaf sets wrong after build: {report['leaf_sets_wrong_after_build']}"
                 + (f", after repair: {report['leaf_sets_wrong_after_repair']}"
                    if "leaf_sets_wrong_after_repair" in report else ""))
    lines.append(f"  {report['messages']} messages, {report['virtual_s']} virtual s, wall {report['wall_s']} s, "
                 f"peak RSS {report['peak_rss_mib']} MiB, trace {report['trace_digest'][:16]}")
    return "\n".join(lines) + "\n"


def plot_hops(report: dict[str, Any], path: str) -> None:
    """Side-by-side bars: the before-failure hop distribution against the paper's (N=100,000)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("tidings: --plot needs matplotlib (pip install 'tidings[plot]')\n")
        return
    from tidings.sim.overlay.experiment import PAPER_HOPS_100K

    ours = {int(h): p for h, p in report["phases"]["before"]["hops_percent"].items()}
    paper = PAPER_HOPS_100K["percent"]
    hops = sorted(set(ours) | set(paper))
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.4
    ax.bar([h - width / 2 for h in hops], [ours.get(h, 0.0) for h in hops], width,
           label=f"tidings sim, N={report['nodes']:,} ({report['build']})")
    ax.bar([h + width / 2 for h in hops], [paper.get(h, 0.0) for h in hops], width, label="Pastry paper, N=100,000")
    ax.set_xlabel("hops")
    ax.set_ylabel("lookups (%)")
    ax.set_xticks(hops)
    ax.set_title(f"Pastry hops, b=4, leaf set 16, {report['model']} model")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_scribe(summary: dict[str, Any], dist: dict[str, Any], prefix: str) -> None:
    """The Scribe experiment's figures, drawn as the paper draws them: PREFIX-delay.png (cumulative
    groups against RMD and RAD), PREFIX-node-stress.png (nodes against their children tables and
    children entries), PREFIX-link-stress.png (links against copies, Scribe beside IP multicast)."""
    from collections import Counter

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("tidings: --plot needs matplotlib (pip install 'tidings[plot]')\n")
        return
    title = f"N={summary['nodes']:,}, {summary['groups']:,} groups, seed {summary['seed']}"

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("rmd", "RMD (max delay / IP multicast's)"), ("rad", "RAD (mean delay / IP multicast's)")):
        values = sorted(dist[key])
        ax.plot(values, [100.0 * (k + 1) / len(values) for k in range(len(values))], label=label)
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("delay penalty")
    ax.set_ylabel("groups (cumulative %)")
    ax.set_title(f"Scribe delay penalty against IP multicast, {title}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(f"{prefix}-delay.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    tables = Counter(dist["node_tables"])
    xs = sorted(tables)
    axes[0].bar(xs, [tables[x] for x in xs], width=1.0)
    axes[0].set_xlabel("children tables (trees it forwards in)")
    entries = Counter(dist["node_children"])
    xs = sorted(x for x in entries if x)
    axes[1].plot(xs, [entries[x] for x in xs], marker=".", linestyle="none",
                 label=f"{entries[0]:,} nodes have none")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("children entries, all trees")
    axes[1].legend()
    for ax in axes:
        ax.set_yscale("log")
        ax.set_ylabel("nodes")
    fig.suptitle(f"Scribe node stress, {title}")
    fig.tight_layout()
    fig.savefig(f"{prefix}-node-stress.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("link_stress_scribe", "Scribe"), ("link_stress_ip", "IP multicast")):
        counts = Counter(dist[key])
        xs = sorted(counts)
        ax.plot(xs, [counts[x] for x in xs], marker=".", linestyle="none", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("link stress (copies of one event per group)")
    ax.set_ylabel("physical links")
    ax.set_title(f"Link stress, {title}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{prefix}-link-stress.png", dpi=120)
    plt.close(fig)
