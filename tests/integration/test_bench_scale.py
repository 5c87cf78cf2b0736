"""bench/scale_subs.py (one broker, many subscriptions over many connections) runs end to end in a
small configuration, so it does not rot: 200 connections x 5 subscriptions over two load processes,
a second of publishing at a fixed rate, then 2,000 events at full speed. Every delivery is checked by
the loads (nothing lost, duplicated, out of order or unmatched); the test checks those verdicts and
that each JSON line holds every field. The figures themselves are not checked."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scale_subs.py"
CONNECTIONS, SUBS = 200, 5
PHASE_FIELDS = {"events", "deliveries", "elapsed_s", "deliveries_per_s", "broker_cpu_s", "broker_cpu_us_per_delivery",
                "broker_cpu_us_per_event", "fanout_mean", "broker_end_mb", "check", "loadavg", "cpu_busy_pct"}
ADMIT_FIELDS = {"admitted_subscriptions", "admitted_connections", "admit_s", "broker_idle_mb",
                "broker_after_subscribing_mb", "broker_cpu_s", "problems", "loadavg", "cpu_busy_pct", "nofile"}


def test_scale_subs_runs_small_and_checks_every_delivery(tmp_path: Path) -> None:
    out = tmp_path / "scale.jsonl"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--connections", str(CONNECTIONS), "--subs-per-connection",
                           str(SUBS), "--hosts", "20", "--rate", "200", "--rate-s", "1", "--full-events", "2000",
                           "--deadline-s", "30", "--out", str(out)],
                          capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["test"] for x in lines] == ["admit", "rate", "full"]
    assert lines == [json.loads(x) for x in proc.stdout.splitlines()]
    admit, rate, full = lines
    assert admit.keys() >= ADMIT_FIELDS
    assert (admit["admitted_connections"], admit["admitted_subscriptions"]) == (CONNECTIONS, CONNECTIONS * SUBS)
    assert admit["problems"] == 0 and admit["broker_after_subscribing_mb"]["rss_mb"] > 0
    assert (rate["events"], full["events"]) == (200, 2000)
    for phase in (rate, full):
        assert phase.keys() >= PHASE_FIELDS
        check = phase["check"]
        assert check["ok"] and (check["lost"], check["surplus"], check["violations"]) == (0, 0, 0)
        assert check["received"] == check["expected"] > 0
        assert phase["deliveries"] > phase["events"]  # fan-out: several subscriptions match an event
    assert full["check"]["expected"] == rate["deliveries"] + full["deliveries"]  # cumulative over the phases
    assert list(tmp_path.iterdir()) == [out]
