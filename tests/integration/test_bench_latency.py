"""bench/loads.py's test (d) against a real broker, as bench/run.py drives it, with a short run:
its line carries the latencies, the stall report of bench/stalls.py (episodes with evidence, none
required: the machine decides), the broker's CPU and context switches per event. A few seconds;
the figures themselves are not checked, only that they are there and consistent."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tidings.testing import BrokerProcess

pytestmark = pytest.mark.integration

LOADS = Path(__file__).resolve().parents[2] / "bench" / "loads.py"
sys.path.insert(0, str(LOADS.parent))
import run  # noqa: E402  (bench/run.py: how it builds and starts the yardstick)

EVENTS, WARMUP = 400, 50
TIMEOUT_S = 60


@pytest.mark.parametrize("test", ["d-best", "d-durable"])
def test_a_latency_run_reports_stalls_cpu_and_switches(tmp_path: Path, test: str) -> None:
    with BrokerProcess(tmp_path / "b") as broker:
        proc = subprocess.run(
            [sys.executable, str(LOADS), "--broker", "tidings", "--proto", "tidings", "--port", str(broker.port),
             "--test", test, "--server-pid", str(broker.pid), "--latency-count", str(EVENTS),
             "--warmup", str(WARMUP), "--data-dir", str(tmp_path / "b"), "--stall-us", "2000",
             "--drain-s", "10", "--idle-s", "5"],
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["errors"] == [] and line["received"] == EVENTS and line["measured"] == EVENTS - WARMUP
    assert 0 < line["p50_us"] <= line["p99_us"] <= line["max_us"]
    stalls = line["stalls"]
    assert stalls["threshold_us"] == 2000
    assert stalls["episodes_count"] >= len(stalls["episodes"])
    assert sum(stalls["verdicts"].values()) == len(stalls["episodes"])
    for ep in stalls["episodes"]:
        assert ep["max_us"] > 2000 and ep["events"] >= 1 and ep["verdict"]
        assert {"broker_run_ms", "broker_wait_ms", "load_wait_ms", "disk_flush_ms", "send_late_ms"} <= ep.keys()
    switches = line["server_ctx_switches_per_event"]
    assert switches["voluntary"] > 0  # every event wakes the broker at least once
    assert line["server_cpu_us_per_event"] is not None and line["server_cpu_us_per_event"] >= 0


@pytest.mark.parametrize("name", ["floor", "floor-prefilled"])
def test_the_floor_broker_makes_each_publish_durable_then_delivers_and_acks_it(
        tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/floor_broker.c, the (d) yardstick, built as bench/run.py builds it, under the same load:
    every event is delivered and acknowledged, and each one is in its log file."""
    monkeypatch.setattr(run, "FLOOR_BINARY", str(tmp_path / "floor_broker"))
    why = run.build_floor()
    if why and why.startswith("no C compiler"):
        pytest.skip(why)
    assert why is None, why
    data = tmp_path / "data"
    data.mkdir()
    port = run.netutil.free_port()
    server = subprocess.Popen(run.server_command(name, port, str(data), str(tmp_path)))
    try:
        assert run.netutil.wait_port(port, 10.0, alive=lambda: server.poll() is None)
        proc = subprocess.run(
            [sys.executable, str(LOADS), "--broker", name, "--proto", "mqtt", "--port", str(port),
             "--test", "d-durable", "--server-pid", str(server.pid), "--latency-count", str(EVENTS),
             "--warmup", str(WARMUP), "--drain-s", "10", "--idle-s", "5"],
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["errors"] == [] and line["received"] == EVENTS and line["measured"] == EVENTS - WARMUP
    assert line["ack_p50_us"] is not None and 0 < line["p50_us"] <= line["p99_us"]
    logged = (data / "log").read_bytes()
    assert logged.count(b"x" * 80) == EVENTS  # each event's filler once: every PUBLISH was written
    if name == "floor-prefilled":
        assert len(logged) == 64 << 20  # written over the zeros, never past them
