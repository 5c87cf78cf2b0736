"""`tidings cluster up` / `status` / `down` / `restart` as a user runs them, also under publishing
with a member killed and restarted by hand: no acknowledged event is lost."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidings.storage.lock import holder
from tidings.testing import wait_for

from .publisher import Publisher, assert_no_acked_event_lost

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
        pids = [b["pid"] for b in json.loads(path.read_text())["brokers"]] if path.exists() else []
        pids += [holder(d) for d in root.glob("broker-*")]
        for pid in pids:
            if pid and pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def cluster_up(root, count):
    out = tidings("cluster", "up", str(count), "--data", str(root), "--base-port", "0")
    assert out.returncode == 0, out.stderr
    return json.loads((root / "cluster.json").read_text())["brokers"]


def by_hand(data, listen, join):
    """A member restarted the way a user would: `tidings broker` in a shell, same data and address."""
    proc = subprocess.Popen([sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(data),
                             "--listen", listen, "--join", join, "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    ready = json.loads(proc.stdout.readline())
    assert ready["listening"] == listen
    return proc


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


def test_cluster_down_stops_members_restarted_by_hand_and_nothing_acked_is_lost(cluster_dir):
    """The sequence that lost events: kill a member of `cluster up 3`, restart it by hand, `cluster
    down`, `cluster up 3` again. Now down stops the hand-started broker too, and a broker can never
    share a data directory, so every acknowledged event is in the member's log afterwards."""
    brokers = cluster_up(cluster_dir, 3)
    victim = brokers[1]
    publisher = Publisher(victim["address"])
    hand = None
    try:
        publisher.start()
        publisher.wait_acks(100)
        os.kill(victim["pid"], signal.SIGKILL)
        wait_for(lambda: holder(victim["data"]) is None, 10, what="the killed member's directory free")
        hand = by_hand(victim["data"], victim["address"], brokers[0]["address"])
        publisher.wait_acks(100)
        assert holder(victim["data"]) == hand.pid

        # while it runs, nobody else gets its directory: not `cluster up`, not a second hand
        out = tidings("cluster", "up", "3", "--data", str(cluster_dir), "--base-port", "0")
        assert out.returncode == 1 and "already up" in out.stderr and out.stderr.count("\n") == 1
        out = tidings("broker", "--data", victim["data"], "--listen", "127.0.0.1:0")
        assert out.returncode == 1 and f"in use by another broker (pid {hand.pid})" in out.stderr

        out = tidings("cluster", "down", "--data", str(cluster_dir))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"stopped": 3, "killed": 0, "already_gone": 0}
        assert hand.wait(10) == 0  # the hand-started broker stopped cleanly too
        assert not any(holder(b["data"]) for b in brokers)

        brokers = cluster_up(cluster_dir, 3)  # free ports: the member comes back on a new address
        publisher.target = brokers[1]["address"]
        publisher.wait_acks(100)
    finally:
        publisher.stop()
        if hand is not None and hand.poll() is None:
            hand.kill()
    acked, read = assert_no_acked_event_lost(publisher, brokers[1]["address"])
    assert read >= acked >= 300
    out = tidings("cluster", "down", "--data", str(cluster_dir))
    assert out.returncode == 0 and json.loads(out.stdout)["stopped"] == 3
    assert "stopped in" in Path(brokers[1]["log"]).read_text().splitlines()[-1]  # its final line

    # without cluster.json, down still finds a broker running on a member's directory
    hand = by_hand(brokers[2]["data"], brokers[2]["address"], brokers[0]["address"])
    out = tidings("cluster", "down", "--data", str(cluster_dir))
    assert out.returncode == 0 and json.loads(out.stdout) == {"stopped": 1, "killed": 0, "already_gone": 2}
    assert hand.wait(10) == 0


def test_cluster_restart_one_member_under_publishing(cluster_dir):
    brokers = cluster_up(cluster_dir, 3)
    publisher = Publisher(brokers[1]["address"])
    try:
        publisher.start()
        publisher.wait_acks(50)
        for index in (1, 0):  # a joining member, then the first one (which joins through another)
            out = tidings("cluster", "restart", str(index), "--data", str(cluster_dir))
            assert out.returncode == 0, out.stderr
            reply = json.loads(out.stdout)
            member = json.loads((cluster_dir / "cluster.json").read_text())["brokers"][index]
            assert reply["address"] == member["address"] == brokers[index]["address"]
            assert reply["pid"] == member["pid"] == holder(member["data"]) != brokers[index]["pid"]
            assert not pid_alive(brokers[index]["pid"])
            assert member["join"] == brokers[index]["join"]  # its own target is kept for next time
            assert reply["joined_through"] in {b["address"] for b in brokers} - {member["address"]}
            publisher.wait_acks(50)
        status = json.loads(tidings("status", "--broker", brokers[0]["address"], "--json").stdout)
        assert status["overlay"]["joined"]
        assert {leaf[1] for leaf in status["overlay"]["leaf_set"]} == {brokers[1]["address"], brokers[2]["address"]}

        # a member restarted by hand (not recorded in cluster.json) is stopped and replaced
        member = json.loads((cluster_dir / "cluster.json").read_text())["brokers"][2]
        os.kill(member["pid"], signal.SIGTERM)
        wait_for(lambda: holder(member["data"]) is None, 15, what="member 2 stopped")
        hand = by_hand(member["data"], member["address"], brokers[0]["address"])
        out = tidings("cluster", "restart", "2", "--data", str(cluster_dir))
        assert out.returncode == 0, out.stderr
        assert hand.wait(10) == 0 and holder(member["data"]) == json.loads(out.stdout)["pid"]
    finally:
        publisher.stop()
    assert_no_acked_event_lost(publisher, brokers[1]["address"])
    out = tidings("cluster", "restart", "7", "--data", str(cluster_dir))
    assert out.returncode == 2 and "members 0 to 2, not 7" in out.stderr
    out = tidings("cluster", "down", "--data", str(cluster_dir))
    assert out.returncode == 0 and json.loads(out.stdout) == {"stopped": 3, "killed": 0, "already_gone": 0}
    out = tidings("cluster", "restart", "0", "--data", str(cluster_dir))
    assert out.returncode == 1 and "no cluster under" in out.stderr


def test_cluster_up_with_auth_says_at_once_what_credential_is_missing_or_refused(cluster_dir, tmp_path):
    from tidings.aio.auth_file import add_identity
    from tidings.core.auth.credentials import KdfParams

    auth = tmp_path / "auth.toml"
    add_identity(auth, "ops", [], [], [], KdfParams(n=1 << 10))
    env = {k: v for k, v in os.environ.items() if k != "TIDINGS_CREDENTIAL"}
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "tidings.cli.main", "cluster", "up", "2", "--data", str(cluster_dir),
                          "--base-port", "0", "--auth", str(auth)], capture_output=True, text=True, timeout=60,
                         check=False, env=env)
    assert out.returncode == 2, out.stderr
    assert "needs a credential" in out.stderr and "--credential NAME:SECRET" in out.stderr
    assert "TIDINGS_CREDENTIAL" in out.stderr and "tidings auth add" in out.stderr
    assert not list(cluster_dir.glob("broker-*"))  # nothing was started
    out = tidings("cluster", "up", "2", "--data", str(cluster_dir), "--base-port", "0", "--auth", str(auth),
                  "--credential", "nobody:" + "x" * 43)
    assert out.returncode == 1 and "broker 0" in out.stderr and "refused the credential" in out.stderr, out.stderr
    assert "authentication failed" in out.stderr and "did not join" not in out.stderr
    assert time.monotonic() - start < 30  # not --timeout's 60 s
    assert not (cluster_dir / "cluster.json").exists()
    assert all(holder(d) is None for d in cluster_dir.glob("broker-*"))  # stopped again


def test_cluster_timeouts_show_their_defaults():
    for action, default in (("up", "60.0"), ("down", "15.0"), ("restart", "60.0")):
        out = tidings("cluster", action, "--help")
        assert out.returncode == 0 and f"(default {default})" in " ".join(out.stdout.split()), out.stdout
