"""`tidings broker` as a user runs it: joining through an address where nothing listens gives up
after --join-timeout with one line, after logging each failed attempt (with backoff); a broker
stops quickly when asked and says so in a final log line."""

import json
import signal
import subprocess
import sys
import time

import pytest

from tidings import sync
from tidings.testing import BrokerProcess

pytestmark = pytest.mark.integration


def broker(*args):
    return subprocess.Popen([sys.executable, "-m", "tidings.cli.main", "broker", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_join_through_nothing_gives_up_after_join_timeout(tmp_path, free_port):
    started = time.monotonic()
    proc = broker("--data", str(tmp_path / "b"), "--listen", "127.0.0.1:0", "--join", f"127.0.0.1:{free_port}",
                  "--join-timeout", "2.5")
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - started
    assert proc.returncode == 1
    assert 2.5 <= took < 10
    assert json.loads(out)["listening"]  # it did listen meanwhile
    errors = [line for line in err.splitlines() if line.startswith("tidings: error:")]
    assert errors == [errors[0]] and f"could not join the overlay through 127.0.0.1:{free_port} within 2.5 s" \
        in errors[0] and "ConnectionRefusedError" in errors[0]
    retries = [line for line in err.splitlines() if "cannot reach" in line and "retrying" in line]
    # backoff from 0.1 s, doubling: 0, 0.1, 0.3, 0.7, 1.5 s (then 3.1 s, past the bound)
    assert 4 <= len(retries) <= 6, err
    bad = subprocess.run([sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(tmp_path / "c"),
                          "--join", "127.0.0.1:1", "--join-timeout", "0"], capture_output=True, text=True,
                         timeout=30, check=False)
    assert bad.returncode == 2 and "--join-timeout must be a positive" in bad.stderr


def test_join_waits_for_a_member_that_comes_up_late(tmp_path, free_port):
    late = broker("--data", str(tmp_path / "late"), "--listen", "127.0.0.1:0", "--join", f"127.0.0.1:{free_port}",
                  "--join-timeout", "30")
    try:
        address = json.loads(late.stdout.readline())["listening"]
        time.sleep(0.5)  # let it fail a few times: the case under test is a member that is not up yet
        with BrokerProcess(tmp_path / "first", port=free_port) as first:
            deadline = time.monotonic() + 20
            while True:
                with sync.connect(address) as c:
                    if c.status()["overlay"]["joined"]:
                        break
                assert time.monotonic() < deadline, "the late broker did not join"
                time.sleep(0.1)
            assert first.status()["overlay"]["joined"]
    finally:
        late.send_signal(signal.SIGTERM)
        late.communicate(timeout=15)
    assert late.returncode == 0


def test_an_idle_broker_stops_quickly_and_says_so(tmp_path):
    proc = broker("--data", str(tmp_path / "b"), "--listen", "127.0.0.1:0", "--log-level", "info")
    address = json.loads(proc.stdout.readline())["listening"]
    with sync.connect(address) as c:
        c.publish("a", "x")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    took = time.monotonic() - started
    assert proc.returncode == 0 and took < 1.0, took
    last = err.strip().splitlines()[-1]
    assert "stopped in" in last and "its log holds 1 events" in last
