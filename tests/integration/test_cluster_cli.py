"""`tidings cluster up` / `status` / `cluster down` as a user runs them."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidings.testing import wait_for

pytestmark = pytest.mark.integration


def tidings(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", *args], check=False,
                          capture_output=True, text=True, timeout=timeout)


def pid_alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def cluster_dir(tmp_path):
    """The cluster's directory; whatever happens, no broker outlives the test."""
    root = tmp_path / "cluster"
    try:
        yield root
    finally:
        path = root / "cluster.json"
        if path.exists():
            for b in json.loads(path.read_text())["brokers"]:
                if pid_alive(b["pid"]):
                    os.kill(b["pid"], signal.SIGKILL)


def test_cluster_up_status_down(cluster_dir):
    out = tidings("cluster", "up", "3", "--data", str(cluster_dir), "--base-port", "0")
    assert out.returncode == 0, out.stderr
    up = json.loads(out.stdout)
    info = json.loads((cluster_dir / "cluster.json").read_text())
    addresses = up["addresses"]
    assert len(addresses) == 3 and addresses == [b["address"] for b in info["brokers"]]
    assert all(len(b["node_id"]) == 32 and pid_alive(b["pid"]) for b in info["brokers"])
    assert len({b["data"] for b in info["brokers"]}) == 3

    out = tidings("status", "--broker", addresses[1], "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    overlay = status["overlay"]
    assert overlay["node_id"] == info["brokers"][1]["node_id"] and overlay["joined"]
    assert {leaf[1] for leaf in overlay["leaf_set"]} == {addresses[0], addresses[2]}
    assert {p["address"] for p in status["peers"]} >= {addresses[0]}
    assert isinstance(status["trees"], list)

    out = tidings("status", "--broker", addresses[0])
    assert out.returncode == 0, out.stderr
    for words in ("overlay", "node id", "leaf set (2)", "routing table", "neighbours", "peers (", "trees ("):
        assert words in out.stdout, words
    assert info["brokers"][0]["node_id"] in out.stdout

    again = tidings("cluster", "up", "2", "--data", str(cluster_dir), "--base-port", "0")
    assert again.returncode == 1 and "already up" in again.stderr and again.stderr.count("\n") == 1

    out = tidings("cluster", "down", "--data", str(cluster_dir))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"stopped": 3, "killed": 0, "already_gone": 0}
    assert not (cluster_dir / "cluster.json").exists()
    wait_for(lambda: not any(pid_alive(b["pid"]) for b in info["brokers"]), 10, what="brokers gone")

    out = tidings("cluster", "down", "--data", str(cluster_dir))
    assert out.returncode == 1 and "no cluster to stop" in out.stderr


def test_cluster_down_copes_with_a_broker_already_dead(cluster_dir):
    out = tidings("cluster", "up", "2", "--data", str(cluster_dir), "--base-port", "0")
    assert out.returncode == 0, out.stderr
    info = json.loads((cluster_dir / "cluster.json").read_text())
    victim = info["brokers"][1]["pid"]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: not pid_alive(victim), 10, what="the killed broker gone")
    out = tidings("cluster", "down", "--data", str(cluster_dir))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"stopped": 1, "killed": 0, "already_gone": 1}


def test_cluster_up_reports_a_broker_that_cannot_start(cluster_dir, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("no_such_key = 1\n")
    start = time.monotonic()
    out = tidings("cluster", "up", "2", "--data", str(cluster_dir), "--base-port", "0", "--config", str(bad))
    assert out.returncode == 1 and "broker 0 exited with code 2" in out.stderr
    assert "unknown configuration key" in out.stderr
    assert not (cluster_dir / "cluster.json").exists()
    assert time.monotonic() - start < 60


def test_cluster_input_errors(cluster_dir):
    out = tidings("cluster", "up", "0", "--data", str(cluster_dir))
    assert out.returncode == 2 and "1 to 256" in out.stderr
    out = tidings("broker", "--data", str(cluster_dir), "--join", "nowhere")
    assert out.returncode == 2 and "--join" in out.stderr
    out = tidings("broker", "--data", str(cluster_dir), "--listen", "0.0.0.0:0", "--join", "127.0.0.1:1")
    assert out.returncode == 2 and "--advertise" in out.stderr
