"""bench/compare.py on recorded result lines (no bench runs): which figures a line of bench/run.py
or bench/gd_bench.py gives, the medians of each side, the verdict at the tolerance's edge in both
directions (throughput: higher is better; latency, CPU per event, memory: lower is better), the
exit status that gates a merge, and the load warning. The lines below are trimmed from
bench/results/results.jsonl and bench/results/gd_bench.jsonl."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import compare  # noqa: E402

RUN_LINES = [
    {"broker": "tidings", "test": "a", "value": 130655, "unit": "events/s", "server_cpu_pct": 86.8,
     "loss_pct": 0.0, "errors": [], "superseded": False},
    {"broker": "tidings", "test": "b", "value": 817862, "unit": "events/s", "server_cpu_pct": 81.8,
     "loss_pct": 0.0, "errors": [], "superseded": False},
    {"broker": "tidings", "test": "d-best", "value": 600.3, "unit": "us", "p50_us": 600.3, "p99_us": 8590.1,
     "server_cpu_pct": 28.1, "errors": [], "superseded": False},
    {"broker": "tidings", "test": "mem", "value": 48.2, "unit": "MB"},
]
GD_LINES = [
    {"test": "gd-overhead-throughput", "mode": "gd", "value": 40705, "unit": "events/s", "loss_pct": 0.0,
     "errors": [], "broker_cpu_us_per_event": {"phb": 10.3, "intermediate": 14.0, "shb": 14.6}},
    {"test": "gd-overhead-cpu", "mode": "best-effort", "value": 6388.9, "unit": "us", "p50_us": 6388.9,
     "p99_us": 24817.9, "errors": [], "broker_cpu_us_per_event": {"phb": 245.0, "intermediate": 57.0, "shb": 57.0}},
    {"broker": "tidings", "test": "gd-cross", "value": 58386, "unit": "events/s", "loss_pct": 0.0, "errors": [],
     "broker_cpu_us_per_event": {"phb": 7.8, "shb": 10.6, "shb2": 15.6}},
    {"test": "gd-latency", "value": 5382.6, "unit": "us", "p50_us": 5382.6, "p99_us": 21294.8, "errors": [],
     "broker_cpu_us_per_event": {"phb": 378.2, "root": 198.2, "shb": 149.1}},
]
NOT_FIGURES = [
    {"test": "meta", "tag": "x", "versions": {}},
    {"broker": "tidings", "test": "c", "value": 102852, "unit": "events/s", "superseded": True},  # disturbed
    {"broker": "tidings", "test": "a", "value": None, "errors": ["load timed out"]},
    {"broker": "tidings+auth", "test": "a", "value": 120000, "unit": "events/s"},
    {"broker": "nats-jetstream-cluster", "test": "gd-cross", "value": 38158, "unit": "events/s",
     "broker_cpu_us_per_event": {"pub-server": 4.8}},
]


def named(line: dict[str, Any]) -> dict[str, tuple[str, bool, float]]:
    return {f.name: (f.unit, f.higher_is_better, v) for f, v in compare.figures(line)}


def tagged(line: dict[str, Any], side: str, cid: str = "T1", rev: str = "abc1234") -> dict[str, Any]:
    return {**line, "tag": f"compare:{cid}:{side}:{rev}"}


def test_the_figures_of_each_recorded_line() -> None:
    a = named(RUN_LINES[0])
    assert a["run a events/s"] == ("events/s", True, 130655.0)
    unit, higher, us = a["run a CPU broker"]
    assert (unit, higher) == ("us/event", False) and us == pytest.approx(1e6 * 0.868 / 130655, abs=1e-3)
    assert named(RUN_LINES[2]) == {"run d-best p50": ("us", False, 600.3), "run d-best p99": ("us", False, 8590.1)}
    assert named(RUN_LINES[3]) == {"run mem peak RSS": ("MB", False, 48.2)}
    assert set(named(GD_LINES[0])) == {f"gd overhead-throughput gd {x}" for x in
                                       ("events/s", "CPU phb", "CPU intermediate", "CPU shb")}
    assert named(GD_LINES[1])["gd overhead-cpu best-effort p99"] == ("us", False, 24817.9)
    assert named(GD_LINES[2])["gd cross events/s"] == ("events/s", True, 58386.0)
    assert named(GD_LINES[3])["gd latency CPU root"] == ("us/event", False, 198.2)
    # with its CPU share, span and count, a gd line's CPU per event is not rounded to 0.1 us
    precise = named({**GD_LINES[0], "sent": 841300, "span_s": 5.28,
                     "broker_cpu_pct": {"phb": 67.0, "intermediate": 17.2, "shb": 53.2}})
    assert precise["gd overhead-throughput gd CPU intermediate"][2] == pytest.approx(1.0794, abs=1e-4)
    for line in NOT_FIGURES:
        assert named(line) == {}, line


def test_medians_per_side_only_of_this_comparison() -> None:
    values = {"base": [100.0, 120.0, 110.0, 90.0], "head": [104.0, 96.0, 300.0]}
    lines = [tagged({**RUN_LINES[0], "value": v}, side) for side, vs in values.items() for v in vs]
    lines += [tagged({**RUN_LINES[0], "value": 1.0}, "head", cid="T0"), {**RUN_LINES[0], "value": 1.0}]
    collected = compare.collect(lines + NOT_FIGURES, "T1")
    (fig,) = [f for f in collected if f.name == "run a events/s"]
    assert collected[fig] == values
    (row,) = [r for r in compare.judge(collected, 5.0, []) if r.figure == fig]
    assert row.ratio == pytest.approx(104.0 / 105.0) and row.verdict == "ok"


@pytest.mark.parametrize(("base", "head", "higher", "expected"), [
    (100.0, 95.0, True, "ok"), (100.0, 94.9, True, "WORSE"), (100.0, 105.1, True, "better"),
    (600.0, 630.0, False, "ok"), (600.0, 630.6, False, "WORSE"), (600.0, 569.0, False, "better"),
    (0.0, 0.0, True, "ok"), (0.0, 1.0, False, "WORSE"),
])
def test_the_verdict_at_the_edge_of_the_tolerance(base: float, head: float, higher: bool, expected: str) -> None:
    assert compare.verdict(base, head, higher, 5.0) == expected


def test_schedule_alternates_the_sides() -> None:
    assert compare.schedule(3, "alternate") == ["base", "head"] * 3
    assert compare.schedule(2, "abba") == ["base", "head", "head", "base"]
    benches = compare.parse_benches(["run:a,d", "gd:cross,latency"])
    assert compare.runs(benches, 1, "alternate") == [
        ("base", "run", "a,d"), ("base", "gd", "cross"), ("base", "gd", "latency"),
        ("head", "run", "a,d"), ("head", "gd", "cross"), ("head", "gd", "latency")]
    with pytest.raises(SystemExit):
        compare.parse_benches(["gd:overhead,nope"])


def write_comparison(path: Path, head_scale: dict[str, float], loadavg: float = 0.5,
                     drop_head: str | None = None) -> None:
    """Two rounds of every recorded line per side; head's values of a test scaled."""
    lines: list[dict[str, Any]] = [{"test": "compare-meta", "compare_id": "T1", "base_label": "aaaaaaa",
                                    "head_label": "bbbbbbb", "rounds": 2, "tolerance_pct": 5.0, "cpus": 2,
                                    "loadavg_before": [loadavg, 1.0, 1.0], "notes": []}]
    for _ in range(2):
        for side in compare.SIDES:
            for line in RUN_LINES + GD_LINES:
                if side == "head" and line["test"] == drop_head:
                    continue
                scale = head_scale.get(line["test"], 1.0) if side == "head" else 1.0
                lines.append(tagged({**line, "value": line["value"] * scale}, side))
    lines.append({"test": "compare-end", "compare_id": "T1", "notes": [], "loadavg_after": [loadavg, 1.0, 1.0]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_report_exit_status_gates_on_a_worse_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "compare.jsonl"
    write_comparison(out, {"a": 1.02, "b": 1.2})
    assert compare.main(["--report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| run a events/s | events/s | higher | 130,655 (n=2) | 133,268 (n=2) | 1.020 | ok |" in text
    assert "| run b events/s | events/s | higher | 817,862 (n=2) | 981,434 (n=2) | 1.200 | better |" in text
    assert "WARNING" not in text and "load average (1 min): before 0.50, after 0.50; 2 cores" in text

    write_comparison(out, {"a": 0.9})
    assert compare.main(["--report", str(out)]) == compare.EXIT_WORSE
    text = capsys.readouterr().out
    assert "| run a events/s | events/s | higher | 130,655 (n=2) | 117,590 (n=2) | 0.900 | WORSE |" in text
    # the broker's CPU per event, derived from the same line, rises as the rate falls
    assert "| run a CPU broker | us/event | lower | 6.64 (n=2) | 7.38 (n=2) | 1.111 | WORSE |" in text
    assert compare.main(["--report", str(out), "--ignore", "^run a "]) == 0
    assert "| 0.900 | info |" in capsys.readouterr().out
    assert compare.main(["--report", str(out), "--tolerance-pct", "12"]) == 0
    capsys.readouterr()


def test_report_says_missing_and_warns_of_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "compare.jsonl"
    write_comparison(out, {}, loadavg=9.5, drop_head="gd-latency")
    assert compare.main(["--report", str(out)]) == compare.EXIT_MISSING
    text = capsys.readouterr().out
    assert "| gd latency p50 | us | lower | 5,383 (n=2) | - | - | missing |" in text
    assert "WARNING: the load average exceeded the core count (2)" in text
    assert compare.main(["--report", str(out), "--compare-id", "nope"]) == compare.EXIT_MISSING


def _checkouts(tmp_path: Path, ours: bytes, theirs: bytes) -> tuple[Path, compare.Side]:
    """This checkout (a `.c` source and its compiled module) and a side compare made (its `.c` only)."""
    repo, side_root = tmp_path / "repo", tmp_path / "side"
    for root, source in ((repo, ours), (side_root, theirs)):
        (root / "src" / "pkg").mkdir(parents=True)
        (root / "src" / "pkg" / "_fast.c").write_bytes(source)
    (repo / "src" / "pkg" / "_fast.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF built from ours")
    return repo, compare.Side("head", "0" * 40, "0000000", side_root, admin_dir=tmp_path / "admin")


def test_a_side_gets_the_compiled_module_of_the_same_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh worktree has no compiled module: without one tidings runs the Python fallback, and a
    compare would measure that (stop 27's compare of main did). The same source: ours is copied."""
    repo, side = _checkouts(tmp_path, b"int x;\n", b"int x;\n")
    monkeypatch.setattr(compare, "REPO", repo)
    built: list[list[str]] = []
    monkeypatch.setattr(compare.subprocess, "run", lambda cmd, **kw: built.append(cmd))
    assert compare.native(side) == ["src/pkg/_fast.c: copied"]
    assert (side.root / "src/pkg/_fast.cpython-311-x86_64-linux-gnu.so").read_bytes() == b"\x7fELF built from ours"
    assert not built
    invoking = compare.Side("head", "worktree", "0000000+dirty", repo)  # this checkout: left as it is
    assert compare.native(invoking) == []


def test_a_side_whose_source_differs_builds_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, side = _checkouts(tmp_path, b"int x;\n", b"int y;\n")
    monkeypatch.setattr(compare, "REPO", repo)
    built: list[tuple[list[str], Path]] = []

    def run(cmd: list[str], **kw: Any) -> Any:
        built.append((cmd, kw["cwd"]))
        return compare.subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(compare.subprocess, "run", run)
    assert compare.native(side) == ["built in place (setup.py build_ext --inplace)"]
    assert built == [([sys.executable, "setup.py", "build_ext", "--inplace"], side.root)]
    assert not (side.root / "src/pkg/_fast.cpython-311-x86_64-linux-gnu.so").exists()  # ours is not theirs
