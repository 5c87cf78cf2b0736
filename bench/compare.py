#!/usr/bin/env python3
"""Two revisions of tidings, the same benches, alternated on one machine: is the head slower?

  python bench/compare.py --base REV [--head REV|worktree] [--rounds 3]
                          [--bench run:a,b,c,d] [--bench gd:overhead,cross,latency]
                          [--duration-s 5] [--quiet-wait-s S] [--tolerance-pct 5] [--ignore REGEX]
                          [--order alternate|abba] [--out bench/results/compare.jsonl]
  python bench/compare.py --report bench/results/compare.jsonl [--compare-id ID]   # the table again

Each revision is checked out into a temporary git worktree of its own (`git worktree add
--detach`); `--head worktree` (the default) is this checkout as it is, uncommitted changes
included. Every bench runs from its own side's checkout (the load clients import tidings' wire
modules, which move between revisions) with the invoking interpreter's venv and PYTHONPATH set to
that side's src; a one-line import check proves each side imports its own tidings first. A
checkout compare made gets the compiled modules of its `.c` sources (the publish intake's
`_batch`): this checkout's where the source is the same, else built in place; without them it
would run the Python fallbacks and measure those. Only tidings runs (`bench/run.py --brokers tidings`); gd's
`cross` test also starts its NATS cluster when nats-server is installed, and compare keeps only
tidings' figures.

Runs alternate, one bench run per side in turn (`--order alternate`: base, head, base, head, ...;
`abba`: base, head, head, base, ..., which also cancels a steady drift within each pair), each
bench invoked with `--rounds 1` and `--tag compare:ID:SIDE:REV`, so a drift of the machine falls
on both sides. Every result line goes to --out (one file of its own, default
bench/results/compare.jsonl) with that tag. The table gives, per figure, the median over the
rounds of each side, the ratio head/base and a verdict: `ok` (within --tolerance-pct), `better`,
`WORSE`, `missing` (no value on one side), `info` (matched by --ignore: shown, not judged). For
throughput higher is better; for latency, CPU per event and memory lower is better.

Exit status: 0 when no judged figure is worse than the tolerance, 1 when one is (so it can gate
a merge), 2 when a judged figure is missing on a side (a bench failed; nothing to judge), 130 on
Ctrl-C. The worktrees are removed in every case. The load average before and after is printed;
above the core count the figures mean little, and the table says so.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SIDES = ("base", "head")
BENCH_SCRIPTS = {"run": "run.py", "gd": "gd_bench.py"}
BENCH_TESTS = {"run": ("a", "b", "c", "d", "e"), "gd": ("overhead", "cross", "latency")}
# the files whose differences between the sides change the measuring instrument itself
INSTRUMENT = ("bench/run.py", "bench/gd_bench.py", "bench/loads.py", "bench/tidings_client.py", "bench/netutil.py")
TAG = re.compile(r"^compare:(?P<id>[^:]+):(?P<side>base|head):(?P<rev>\S+)$")
RUN_TIMEOUT_S = 1800.0  # one bench run (one side, one round); the benches bound their own waits below it
SETTLE_S = 10.0  # after Ctrl-C, the bench (which got it too) may stop by itself within this
STOP_WAIT_S = 30.0  # a bench asked to stop gets this long to stop its brokers before SIGKILL
EXIT_WORSE, EXIT_MISSING, EXIT_INTERRUPTED = 1, 2, 130


# ---- figures: from result lines to medians and verdicts ------------------------------------------


@dataclass(frozen=True)
class Figure:
    name: str
    unit: str
    higher_is_better: bool


def figures(line: dict[str, Any]) -> Iterator[tuple[Figure, float]]:
    """The figures one result line of bench/run.py or bench/gd_bench.py gives for tidings (nothing
    for meta lines, superseded (disturbed) lines, failed measurements and other brokers)."""
    test = line.get("test")
    if not isinstance(test, str) or test == "meta" or line.get("superseded") or line.get("value") is None:
        return
    if line.get("broker", "tidings") != "tidings":  # peers (gd cross's NATS), tidings+auth and the like
        return
    if test.startswith("gd-"):
        prefix = "gd " + test[3:] + (f" {line['mode']}" if line.get("mode") else "")
    elif test == "e":
        prefix = f"run e {line.get('filters')} filters"
    else:
        prefix = f"run {test}"
    unit = line.get("unit")
    if unit == "events/s":
        yield Figure(f"{prefix} events/s", "events/s", True), float(line["value"])
    elif unit == "MB":
        yield Figure(f"{prefix} peak RSS", "MB", False), float(line["value"])
    elif unit == "us":
        for key in ("p50_us", "p99_us"):
            if line.get(key) is not None:
                yield Figure(f"{prefix} {key[:3]}", "us", False), float(line[key])
        if line.get("server_cpu_pct") is not None and line.get("rate_per_s"):
            # (d) at a fixed rate: the broker's CPU per event, steadier than latency on a busy machine
            us = 1e6 * line["server_cpu_pct"] / 100 / line["rate_per_s"]
            yield Figure(f"{prefix} CPU broker", "us/event", False), round(us, 3)
    # CPU per event: less at the mercy of a shared machine than wall-clock rates
    for who, us in cpu_us_per_event(line).items():
        yield Figure(f"{prefix} CPU {who}", "us/event", False), us
    if unit == "events/s" and line.get("server_cpu_pct") is not None and line["value"] > 0:
        # bench/run.py: the broker's CPU over the same span as the rate (gd_bench's lines have none)
        us = 1e6 * line["server_cpu_pct"] / 100 / line["value"]
        yield Figure(f"{prefix} CPU broker", "us/event", False), round(us, 3)


def cpu_us_per_event(line: dict[str, Any]) -> dict[str, float]:
    """bench/gd_bench.py's CPU per event published of each broker, from its CPU share, the span and
    the count (its own `broker_cpu_us_per_event` is rounded to 0.1 us, too coarse near 1 us)."""
    shares, span_s, sent = line.get("broker_cpu_pct"), line.get("span_s"), line.get("sent")
    if isinstance(shares, dict) and span_s and sent:
        return {who: round(1e6 * pct / 100 * span_s / sent, 4) for who, pct in shares.items() if pct is not None}
    rounded = line.get("broker_cpu_us_per_event")
    return {who: float(us) for who, us in rounded.items() if us is not None} if isinstance(rounded, dict) else {}


def side_of(line: dict[str, Any]) -> tuple[str, str, str] | None:
    """(compare id, side, revision) from the line's tag, or None for a line of no comparison."""
    m = TAG.match(str(line.get("tag") or ""))
    return (m["id"], m["side"], m["rev"]) if m else None


def collect(lines: Iterable[dict[str, Any]], compare_id: str) -> dict[Figure, dict[str, list[float]]]:
    """Per figure (in the order first seen), the values of each side."""
    out: dict[Figure, dict[str, list[float]]] = {}
    for line in lines:
        tagged = side_of(line)
        if tagged is None or tagged[0] != compare_id:
            continue
        for fig, value in figures(line):
            out.setdefault(fig, {s: [] for s in SIDES})[tagged[1]].append(value)
    return out


def verdict(base: float, head: float, higher_is_better: bool, tolerance_pct: float) -> str:
    """`ok` within the tolerance, else `better` or `WORSE`; the tolerance's edge itself is ok."""
    if base == 0:
        return "ok" if head == 0 else ("better" if higher_is_better else "WORSE")
    change_pct = 100 * (head / base - 1) * (1 if higher_is_better else -1)  # > 0: head is better
    if change_pct < -tolerance_pct - 1e-9:
        return "WORSE"
    return "better" if change_pct > tolerance_pct + 1e-9 else "ok"


@dataclass
class Row:
    figure: Figure
    base: list[float]
    head: list[float]
    verdict: str
    ratio: float | None = None


def judge(collected: dict[Figure, dict[str, list[float]]], tolerance_pct: float,
          ignore: list[re.Pattern[str]]) -> list[Row]:
    rows = []
    for fig, values in collected.items():
        base, head = values["base"], values["head"]
        ratio = None
        if base and head and statistics.median(base):
            ratio = statistics.median(head) / statistics.median(base)
        if any(p.search(fig.name) for p in ignore):
            what = "info"
        elif not base or not head:
            what = "missing"
        else:
            what = verdict(statistics.median(base), statistics.median(head), fig.higher_is_better, tolerance_pct)
        rows.append(Row(fig, base, head, what, ratio))
    return rows


def exit_status(rows: list[Row]) -> int:
    if any(r.verdict == "WORSE" for r in rows):
        return EXIT_WORSE
    if not rows or any(r.verdict == "missing" for r in rows):
        return EXIT_MISSING
    return 0


def fmt(values: list[float]) -> str:
    if not values:
        return "-"
    m = statistics.median(values)
    text = f"{m:,.0f}" if abs(m) >= 1000 else f"{m:.3g}"
    return f"{text} (n={len(values)})"


@dataclass
class Context:
    """What the table says besides the figures."""

    compare_id: str
    base: str
    head: str
    rounds: int
    tolerance_pct: float
    cpus: int
    load_before: float | None = None
    load_after: float | None = None
    notes: list[str] = field(default_factory=list)


def render(rows: list[Row], ctx: Context) -> str:
    out = [f"compare {ctx.compare_id}: base {ctx.base} against head {ctx.head}, {ctx.rounds} round(s) "
           f"alternated, tolerance {ctx.tolerance_pct:g} %", ""]
    loads = [x for x in (ctx.load_before, ctx.load_after) if x is not None]
    out.append("load average (1 min): before " + (f"{ctx.load_before:.2f}" if ctx.load_before is not None else "-")
               + ", after " + (f"{ctx.load_after:.2f}" if ctx.load_after is not None else "-")
               + f"; {ctx.cpus} cores")
    if any(x > ctx.cpus for x in loads):
        out.append(f"WARNING: the load average exceeded the core count ({ctx.cpus}): other work shared the "
                   "CPUs, so these figures mean little; run again on a quiet machine")
    out.extend(ctx.notes)
    out.append("")
    out.append("| figure | unit | better | base median | head median | head/base | verdict |")
    out.append("|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        better = "higher" if r.figure.higher_is_better else "lower"
        out.append(f"| {r.figure.name} | {r.figure.unit} | {better} | {fmt(r.base)} | {fmt(r.head)} | {ratio} "
                   f"| {r.verdict} |")
    counts = collections.Counter(r.verdict for r in rows)
    out.append("")
    out.append("verdicts: " + (", ".join(f"{v} {n}" for v, n in sorted(counts.items())) or "no figures"))
    return "\n".join(out)


def lossy(lines: Iterable[dict[str, Any]], compare_id: str) -> list[str]:
    """Notes on the comparison's lines that lost events or carry errors (figures still counted)."""
    notes = []
    for line in lines:
        tagged = side_of(line)
        if tagged is None or tagged[0] != compare_id or line.get("test") == "meta":
            continue
        if line.get("loss_pct") or line.get("errors"):
            notes.append(f"note: {tagged[1]} {line.get('test')} {line.get('mode') or line.get('broker') or ''}: "
                         f"loss {line.get('loss_pct')} %, errors {str(line.get('errors') or '')[:200]}")
    return notes


def report(lines: list[dict[str, Any]], compare_id: str | None, tolerance_pct: float | None,
           ignore: list[re.Pattern[str]]) -> tuple[str, int]:
    """The table and exit status of one recorded comparison (the latest in `lines` by default)."""
    metas = [x for x in lines if x.get("test") == "compare-meta" and compare_id in (None, x.get("compare_id"))]
    if compare_id is None:
        ids = [t[0] for t in map(side_of, lines) if t is not None]
        compare_id = metas[-1]["compare_id"] if metas else (ids[-1] if ids else None)
    if compare_id is None:
        return "no comparison in these lines", EXIT_MISSING
    meta = metas[-1] if metas else {}
    ends = [x for x in lines if x.get("test") == "compare-end" and x.get("compare_id") == compare_id]
    end: dict[str, Any] = ends[-1] if ends else {}
    tol = tolerance_pct if tolerance_pct is not None else float(meta.get("tolerance_pct", 5.0))
    revs = {t[1]: t[2] for t in map(side_of, lines) if t is not None and t[0] == compare_id}
    base, head = (str(meta.get(f"{s}_label", revs.get(s, "?"))) for s in SIDES)
    ctx = Context(compare_id, base, head, int(meta.get("rounds", 0)), tol, int(meta.get("cpus") or os.cpu_count() or 1),
                  meta.get("loadavg_before", [None])[0], end.get("loadavg_after", [None])[0],
                  [*meta.get("notes", []), *end.get("notes", []), *lossy(lines, compare_id)])
    rows = judge(collect(lines, compare_id), tol, ignore)
    return render(rows, ctx), exit_status(rows)


def read_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    with path.open() as f:
        for text in f:
            with contextlib.suppress(ValueError):
                line = json.loads(text)
                if isinstance(line, dict):
                    out.append(line)
    return out


# ---- running: worktrees, alternation, cleanup ----------------------------------------------------


def git(*args: str, cwd: Path = REPO) -> str:
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


@dataclass
class Side:
    name: str  # base or head
    rev: str  # a full commit, or "worktree"
    label: str  # short commit, "+dirty" for a worktree with changes
    root: Path
    admin_dir: Path | None = None  # the git worktree's administrative directory, when we made one


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def checkout(name: str, rev: str, tmp: Path) -> Side:
    if rev == "worktree":
        dirty = git("status", "--porcelain", "--", "src", "bench", ":!bench/results")  # results are not code
        return Side(name, rev, git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else ""), REPO)
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    root = tmp / name
    git("worktree", "add", "--detach", str(root), commit)
    side = Side(name, commit, commit[:7], root, Path(git("rev-parse", "--absolute-git-dir", cwd=root)))
    progress(f"{name}: {rev} = {side.label}, worktree {root}")
    return side


def remove(side: Side) -> None:
    """Remove a worktree we added (only ours: by its path, never a prune of all)."""
    if side.admin_dir is None:
        return
    proc = subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(side.root)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shutil.rmtree(side.root, ignore_errors=True)
        shutil.rmtree(side.admin_dir, ignore_errors=True)
    side.admin_dir = None


def side_env(side: Side) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(side.root / "src"), "PYTHONDONTWRITEBYTECODE": "1"}


def native(side: Side) -> list[str]:
    """Give a checkout we made the compiled modules its `.c` sources build (a fresh worktree has
    none, and tidings then runs their Python fallbacks, slower: a compare would measure that):
    the invoking checkout's module where its source is byte for byte the same, else a build in
    place (`setup.py build_ext --inplace`). What each got, for the meta line."""
    if side.admin_dir is None:  # the invoking checkout: as it is
        return []
    got = []
    for source in sorted((side.root / "src").rglob("*.c")):
        mine = REPO / source.relative_to(side.root)
        built = sorted(mine.parent.glob(mine.stem + ".*.so")) if mine.exists() else []
        if built and mine.read_bytes() == source.read_bytes():
            shutil.copy2(built[0], source.parent / built[0].name)
            got.append(f"{source.relative_to(side.root)}: copied")
            continue
        proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], capture_output=True,
                              text=True, env=side_env(side), cwd=side.root, check=False, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{side.name}: setup.py build_ext failed: {proc.stderr.strip()[-300:]}")
        progress(f"{side.name}: compiled modules built in place")
        return ["built in place (setup.py build_ext --inplace)"]
    for note in got:
        progress(f"{side.name}: {note}")
    return got


def check_import(side: Side) -> None:
    proc = subprocess.run([sys.executable, "-c", "import os, tidings; print(os.path.realpath(tidings.__file__))"],
                          capture_output=True, text=True, env=side_env(side), cwd=side.root, check=False)
    where = proc.stdout.strip()
    src = os.path.realpath(side.root / "src") + os.sep
    if proc.returncode != 0 or not where.startswith(src):
        raise RuntimeError(f"{side.name} imports tidings from {where or proc.stderr.strip()[-300:]}, not {src}")
    progress(f"{side.name}: imports {where}")


def check_options(side: Side, kind: str, options: list[str]) -> None:
    """The side's bench knows every option compare passes (an old revision may not)."""
    script = side.root / "bench" / BENCH_SCRIPTS[kind]
    if not script.exists():
        raise RuntimeError(f"{side.name} ({side.label}) has no bench/{BENCH_SCRIPTS[kind]}")
    proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                          env=side_env(side), cwd=side.root, check=False, timeout=120)
    unknown = [o for o in options if o not in proc.stdout]
    if proc.returncode != 0 or unknown:
        raise RuntimeError(f"{side.name}'s bench/{BENCH_SCRIPTS[kind]} does not take {unknown or proc.stderr[-300:]}")


def bench_command(side: Side, kind: str, tests: str, out: Path, tag: str, args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, str(side.root / "bench" / BENCH_SCRIPTS[kind]), "--tests", tests, "--rounds", "1",
           "--out", str(out), "--tag", tag, "--duration-s", str(args.duration_s)]
    if kind == "run":
        cmd += ["--brokers", "tidings"]
        if args.quiet_wait_s is not None:
            cmd += ["--quiet-wait-s", str(args.quiet_wait_s)]
    return cmd


def bench_options(kind: str, args: argparse.Namespace) -> list[str]:
    opts = ["--tests", "--rounds", "--out", "--tag", "--duration-s"]
    if kind == "run":
        opts += ["--brokers"] + (["--quiet-wait-s"] if args.quiet_wait_s is not None else [])
    return opts


def schedule(rounds: int, order: str) -> list[str]:
    """The order of the sides: base, head, base, head, ... or base, head, head, base, ..."""
    pairs = [("head", "base") if order == "abba" and r % 2 else SIDES for r in range(rounds)]
    return [s for pair in pairs for s in pair]


def runs(benches: list[tuple[str, str]], rounds: int, order: str) -> list[tuple[str, str, str]]:
    """(side, bench, tests) of every run in turn. gd_bench runs once per test: its cross test
    raises when nats-server is missing (after its tidings line), which must not cost the others."""
    each = [(k, one) for k, t in benches for one in (t.split(",") if k == "gd" else [t])]
    return [(s, k, t) for s in schedule(rounds, order) for k, t in each]


def stop(proc: subprocess.Popen[str]) -> None:
    """Let a bench that is stopping (Ctrl-C reaches the whole process group) stop its brokers;
    else ask it to (it stops them on SIGTERM); kill it last."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(SETTLE_S)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def run_bench(cmd: list[str], side: Side, timeout_s: float) -> tuple[int, list[str]]:
    """Run one bench, its output shown on stderr (indented); its exit status and last lines."""
    tail: collections.deque[str] = collections.deque(maxlen=15)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env=side_env(side), cwd=side.root, stdin=subprocess.DEVNULL)
    timer = threading.Timer(timeout_s, proc.terminate)
    timer.start()
    try:
        assert proc.stdout is not None
        for text in proc.stdout:
            tail.append(text.rstrip())
            progress("    " + text.rstrip())
        proc.wait()
    finally:
        timer.cancel()
        stop(proc)
    return proc.returncode, list(tail)


def _interrupted(signum: int, _frame: Any) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):  # a second Ctrl-C must not cut the cleanup short
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def record(out: Path, lines: Iterable[dict[str, Any]]) -> None:
    with out.open("a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def compare(args: argparse.Namespace, benches: list[tuple[str, str]], ignore: list[re.Pattern[str]]) -> int:
    compare_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    cpus = os.cpu_count() or 1
    load_before = os.getloadavg()
    sides: dict[str, Side] = {}
    notes: list[str] = []  # of the runs, for the end line (the meta line has the instrument's)
    with tempfile.TemporaryDirectory(prefix="tidings-compare-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            for name, rev in (("base", args.base), ("head", args.head)):
                sides[name] = checkout(name, rev, tmp)
            built = {side.name: native(side) for side in sides.values()}
            for side in sides.values():
                check_import(side)
                for kind, _ in benches:
                    check_options(side, kind, bench_options(kind, args))
            base, head = sides["base"], sides["head"]
            differ = git("diff", "--name-only", base.rev, *([] if head.rev == "worktree" else [head.rev]),
                         "--", *INSTRUMENT).split()
            instrument = ["note: the bench scripts differ between the sides (each runs its own): "
                          + ", ".join(differ)] if differ else []
            for note in instrument:
                progress(note)
            record(out, [{"test": "compare-meta", "compare_id": compare_id, "base": base.rev, "head": head.rev,
                          "base_label": base.label, "head_label": head.label, "rounds": args.rounds,
                          "benches": [f"{k}:{t}" for k, t in benches], "order": args.order,
                          "duration_s": args.duration_s, "tolerance_pct": args.tolerance_pct, "cpus": cpus,
                          "loadavg_before": [round(x, 2) for x in load_before], "notes": instrument, "native": built,
                          "command": "python bench/compare.py " + " ".join(sys.argv[1:]),
                          "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}])
            plan = runs(benches, args.rounds, args.order)
            t_all = time.monotonic()
            for n, (name, kind, tests) in enumerate(plan, 1):
                side = sides[name]
                tag = f"compare:{compare_id}:{name}:{side.label}"
                part = tmp / f"run{n}.jsonl"
                progress(f"[{time.monotonic() - t_all:6.0f}s] run {n} of {len(plan)}: {name} {side.label} "
                         f"{kind}:{tests} (load {os.getloadavg()[0]:.1f})")
                code, tail = run_bench(bench_command(side, kind, tests, part, tag, args), side, args.run_timeout_s)
                lines = read_lines(part) if part.exists() else []
                record(out, [{**x, "bench": kind, "compare_run": n} for x in lines])
                if code != 0:
                    notes.append(f"note: run {n} ({name} {kind}:{tests}) exited {code}; its figures so far are "
                                 f"kept; last output: {' / '.join(tail[-3:])[-400:]}")
                    progress(notes[-1])
            progress(f"[{time.monotonic() - t_all:6.0f}s] done; results in {out}")
        finally:
            for side in sides.values():
                remove(side)
    record(out, [{"test": "compare-end", "compare_id": compare_id, "notes": notes,
                  "loadavg_after": [round(x, 2) for x in os.getloadavg()]}])
    text, status = report(read_lines(out), compare_id, args.tolerance_pct, ignore)
    print(text, flush=True)
    return status


def parse_benches(specs: list[str]) -> list[tuple[str, str]]:
    benches = []
    for spec in specs:
        kind, _, tests = spec.partition(":")
        if kind not in BENCH_TESTS:
            raise SystemExit(f"--bench {spec}: choose run:TESTS or gd:TESTS")
        chosen = [t for t in tests.split(",") if t] or list(BENCH_TESTS[kind])
        unknown = set(chosen) - set(BENCH_TESTS[kind])
        if unknown:
            raise SystemExit(f"--bench {spec}: unknown tests {sorted(unknown)}; from {','.join(BENCH_TESTS[kind])}")
        benches.append((kind, ",".join(chosen)))
    return benches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="the revision to compare against (e.g. the commit before a change)")
    ap.add_argument("--head", default="worktree", help="a revision, or `worktree` (this checkout as it is)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of every bench per side")
    ap.add_argument("--bench", action="append", default=None,
                    help="run:TESTS (bench/run.py, from a,b,c,d,e) or gd:TESTS (bench/gd_bench.py, from "
                         "overhead,cross,latency); repeatable; default run:a,b,c,d and gd:overhead,cross,latency")
    ap.add_argument("--duration-s", type=float, default=5.0, help="publishing time per throughput test")
    ap.add_argument("--quiet-wait-s", type=float, default=None,
                    help="bench/run.py's wait for a quiet machine before each test (its default: 20)")
    ap.add_argument("--tolerance-pct", type=float, default=None, help="how much worse a figure may be (default 5)")
    ap.add_argument("--ignore", action="append", default=[],
                    help="regular expression of figure names shown but not judged (e.g. ' p99$')")
    ap.add_argument("--order", choices=("alternate", "abba"), default="alternate")
    ap.add_argument("--run-timeout-s", type=float, default=RUN_TIMEOUT_S, help="bound on one bench run")
    ap.add_argument("--out", default=str(HERE / "results" / "compare.jsonl"))
    ap.add_argument("--report", metavar="FILE", help="print the table of a recorded comparison, run nothing")
    ap.add_argument("--compare-id", help="with --report: which comparison (default: the latest in FILE)")
    args = ap.parse_args(argv)
    ignore = [re.compile(p) for p in args.ignore]
    if args.report:
        text, status = report(read_lines(Path(args.report)), args.compare_id, args.tolerance_pct, ignore)
        print(text)
        return status
    if not args.base:
        ap.error("--base is required (or --report FILE)")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    args.tolerance_pct = 5.0 if args.tolerance_pct is None else args.tolerance_pct
    benches = parse_benches(args.bench or ["run:a,b,c,d", "gd:overhead,cross,latency"])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupted)
    try:
        return compare(args, benches, ignore)
    except KeyboardInterrupt:
        progress("interrupted: the bench was stopped and the worktrees removed")
        return EXIT_INTERRUPTED
    except RuntimeError as exc:
        progress(f"compare: {exc}")
        return EXIT_MISSING


if __name__ == "__main__":
    sys.exit(main())
