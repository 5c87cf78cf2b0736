"""The guaranteed-delivery and durable experiment and benchmark scripts (bench/gd_experiments.py,
bench/gd_bench.py, bench/durable_experiments.py) run end to end in a tiny configuration, so they
do not rot: a few brokers, a few seconds of publishing. The figures are not checked, only that
each script runs, writes its JSON lines, and (the experiments) that no acknowledged event was
lost, duplicated or reordered."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run(script, *args, timeout=240):
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=timeout, check=False, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_gd_experiment_runs_tiny(tmp_path):
    out = tmp_path / "exp.jsonl"
    run("gd_experiments.py", "--scenario", "intermediate", "--brokers", "5", "--rate", "50", "--warm-s", "1",
        "--stall-s", "0.5", "--down-s", "2", "--after-s", "1", "--out", str(out))
    (line,) = out.read_text().splitlines()
    result = json.loads(line)
    assert result["published_acked"] > 50
    assert result["subscribers"], "no subscriber stayed connected"
    assert (result["lost_total"], result["duplicated_total"], result["out_of_order_total"]) == (0, 0, 0)
    assert set(result["nacks"]) and result["loadavg_start"]


def test_durable_experiment_runs_tiny(tmp_path):
    """bench/durable_experiments.py: the subscriber broker killed and restarted; every durable
    subscriber resumes once, with nothing lost or repeated (the script exits 1 otherwise)."""
    out = tmp_path / "durable.jsonl"
    run("durable_experiments.py", "--rate", "200", "--subscribers", "2", "--warm-s", "1", "--down-s", "1",
        "--after-s", "1.5", "--release-hold-s", "2", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["problems"] == [] and result["resumed"] == [1, 1] and result["acked"] > 400
    assert any(s["delivered"] for s in result["samples"])


def test_gd_bench_runs_tiny(tmp_path):
    out = tmp_path / "bench.jsonl"
    tests = "overhead,latency" + (",cross" if shutil.which("nats-server") else "")
    run("gd_bench.py", "--tests", tests, "--duration-s", "0.5", "--fixed-rate", "200", "--latency-count", "330",
        "--out", str(out))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    kinds = {(x["test"], x.get("mode") or x.get("broker")) for x in lines}
    assert {("gd-overhead-throughput", "gd"), ("gd-overhead-throughput", "best-effort"),
            ("gd-overhead-cpu", "gd"), ("gd-overhead-cpu", "best-effort"), ("gd-latency", None)} <= kinds
    assert all(x.get("value") for x in lines), [x.get("errors") for x in lines]


def test_gd_bench_reports_where_events_were_lost_and_flow_control_holds_an_overrun(tmp_path):
    """The publisher 100,000 events ahead of a subscribers' broker stopped 300 ms a second: every
    broker's loss report is there, and flow control held the pubend's knowledge back (what it
    did not hold would have been dropped on the way and nacked: docs/benchmarks.md)."""
    out = tmp_path / "bench.jsonl"
    run("gd_bench.py", "--tests", "overhead", "--modes", "gd", "--duration-s", "2", "--window", "100000",
        "--shb-stall-ms", "300", "--fixed-rate", "200", "--out", str(out))
    (line,) = [x for x in map(json.loads, out.read_text().splitlines()) if x["test"] == "gd-overhead-throughput"]
    assert line["loss_pct"] == 0 and set(line["loss"]) == {"phb", "intermediate", "shb"}
    for counts in line["loss"].values():
        assert {"nacks_sent", "retransmissions_sent", "ticks_retransmitted", "link_drops",
                "cache_records_evicted", "flow_holds"} <= set(counts)
    assert line["loss"]["phb"]["flow_holds"] > 0


def test_scalability_runs_tiny(tmp_path):
    """bench/scalability.py on real processes (the paper's Figure 4): a PHB and one SHB, one then two
    durable subscribers that disconnect and resume with their tokens while the brokers' CPU is
    measured; nothing lost, repeated or reordered (the script exits 1 otherwise), a peak fitted."""
    out = tmp_path / "fig4.jsonl"
    run("scalability.py", "--mode", "real", "--real-shbs", "1", "--real-subscribers", "1,2", "--warm-s", "0.3",
        "--window-s", "0.7", "--disconnect-every-s", "0.3", "--away-s", "0.1", "--disconnections", "disconnecting",
        "--out", str(out))
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert (line["mode"], line["shbs"], line["k"], line["problems"]) == ("real", 1, [1, 2], [])
    assert all(n > 0 for n in line["reconnections"]) and all(r["acked"] > 400 for r in line["runs"])
    assert line["runs"][1]["utilisation"][1] > 0 and line["delivered_per_s"][1] > line["delivered_per_s"][0]
