"""The `tidings` command as a user runs it: pub, sub, status, and its errors and exit codes."""

import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def tidings(*args, stdin=None, timeout=30):
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", *args], input=stdin, check=False,
                          capture_output=True, text=True, timeout=timeout)


def test_pub_then_sub_from_start_with_filter(broker):
    b = ["--broker", broker.address]
    out = tidings("pub", *b, "nodes/h1/load", "hello", "--attr", "load=2.5", "--attr", "host=h1",
                  "--attr", "up=true", "--attr", 'id="7"', "--attr", "n=3")
    assert out.returncode == 0, out.stderr
    ack = json.loads(out.stdout)
    assert set(ack) == {"pubend", "tick"} and ack["pubend"] == broker.pubend
    lines = "\n".join(f"line {i}" for i in range(5)) + "\n"
    out = tidings("pub", *b, "nodes/h2/load", "--attr", "load=0.5", stdin=lines)
    acks = [json.loads(x) for x in out.stdout.splitlines()]
    assert len(acks) == 5 and [a["tick"] for a in acks] == sorted(a["tick"] for a in acks)
    tidings("pub", *b, "nodes/h3/mem", "\xff-not-text-but-fine")
    out = tidings("sub", *b, "nodes/+/load", "--filter", "load > 1", "--from", "start", "--count", "1",
                  "--timeout", "10")
    assert out.returncode == 0, out.stderr
    (ev,) = [json.loads(x) for x in out.stdout.splitlines()]
    assert ev["channel"] == "nodes/h1/load" and ev["payload"] == "hello" and ev["tick"] == ack["tick"]
    assert ev["attributes"] == {"load": 2.5, "host": "h1", "up": True, "id": "7", "n": 3}
    assert ev["source"]["service"] == "tidings-cli" and ev["time"].endswith("Z")
    out = tidings("sub", *b, "nodes/#", "--from", "start", "--timeout", "2")
    events = [json.loads(x) for x in out.stdout.splitlines()]
    assert [e["payload"] for e in events[1:6]] == [f"line {i}" for i in range(5)]
    assert len(events) == 7


def test_binary_payloads_are_base64(broker):
    from tidings import sync

    with sync.connect(broker.address) as c:
        c.publish("bin", b"\xff\x00\x01")
    out = tidings("sub", "--broker", broker.address, "bin", "--from", "start", "--count", "1",
                  "--timeout", "10")
    ev = json.loads(out.stdout)
    assert ev["payload"] == "/wAB" and ev["payload_encoding"] == "base64"


def test_status(broker):
    from tidings import sync
    from tidings.core.event import tick_to_datetime

    tidings("pub", "--broker", broker.address, "a", "x")
    out = tidings("status", "--broker", broker.address, "--json")
    st = json.loads(out.stdout)
    assert st["events_published"] == 1 and st["log_records"] == 1 and st["pubend"] == broker.pubend
    for key in ("clients", "subscriptions", "log_bytes", "first_tick", "last_tick", "catchup_readers",
                "pending_sync_batches", "blocked_connections"):
        assert key in st
    with sync.connect(broker.address, service="watcher") as c, c.subscribe("a/#", filter="level >= 3"):
        out = tidings("status", "--broker", broker.address)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "1 published here" in text and f"{st['log_bytes']} B" in text
    day = str(tick_to_datetime(st["first_tick"]).date())
    assert f"from {day}T" in text and str(st["first_tick"]) not in text  # ISO times, not raw ticks
    sub_line = next(line for line in text.splitlines() if " a/# " in line)
    assert "level >= 3" in sub_line and "live" in sub_line
    assert any("watcher" in line for line in text.splitlines()) and "_" not in text.split("\n\n")[0]


@pytest.mark.parametrize(("args", "code", "words"), [
    (["pub", "a/+/b", "x"], 2, "wildcard"),
    (["sub", "a/#/b", "--timeout", "1"], 2, "'#' must be the last"),
    (["sub", "a", "--filter", "load >", "--timeout", "1"], 2, "position"),
    (["sub", "a", "--from", "yesterday", "--timeout", "1"], 2, "--from"),
    (["pub", "a", "x", "--attr", "novalue"], 2, "KEY=VALUE"),
])
def test_bad_input_is_one_clear_line_and_a_nonzero_exit(shared_broker, args, code, words):
    out = tidings(*args[:1], "--broker", shared_broker.address, *args[1:])
    assert out.returncode == code
    assert words in out.stderr and out.stderr.count("\n") == 1 and out.stderr.startswith("tidings: error:")


def test_unreachable_broker():
    out = tidings("status", "--broker", "127.0.0.1:1", "--connect-timeout", "2")
    assert out.returncode == 3 and "cannot connect" in out.stderr


def test_broker_bad_config(tmp_path):
    cfg = tmp_path / "b.toml"
    cfg.write_text("frame_bytes_maxx = 3\n")
    out = tidings("broker", "--data", str(tmp_path / "d"), "--listen", "127.0.0.1:0", "--config", str(cfg))
    assert out.returncode == 2 and "unknown configuration key 'frame_bytes_maxx'" in out.stderr


def test_demo_kills_and_restarts_a_broker_and_every_stream_is_exactly_once_in_order(tmp_path):
    out = tidings("demo", "--data", str(tmp_path), "--hosts", "6", "--rounds", "6", "--no-spark", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    streams = [line for line in out.stdout.splitlines() if "delivered" in line]
    assert len(streams) == 4 and all("lost 0 duplicated 0 reordered 0 unexpected 0" in line for line in streams)
    (fault,) = [line for line in out.stdout.splitlines() if line.startswith("broker ") and "kill -9" in line]
    assert "restarted at" in fault and "back in the overlay at" in fault and "root of" in fault
    killed = fault.split()[1]
    publisher = out.stdout.split("monitor reports at ")[1].split()[0]
    assert killed not in {publisher} | {line.split(" at ")[1].split()[0] for line in streams}  # hosts no client
    assert re.search(r"latency publish -> delivery: p50 [0-9.]+ ms, p90 [0-9.]+ ms, p99 [0-9.]+ ms, max [0-9.]+ ms\n",
                     out.stdout)
    (store,) = [line for line in out.stdout.splitlines() if line.startswith("tuple store ")]
    assert "killed with kill -9" in store and "restarted from its SQLite" in store
    stages = [line for line in out.stdout.splitlines() if " received " in line]
    assert [line.split("received")[0].strip() for line in stages] == [
        "monitors -> tuple store (journal)", "queries -> tuple store (journal)", "tuple store answers -> query client"]
    assert all("lost 0 duplicated 0 reordered 0 unexpected 0  (exactly once, in order)" in line for line in stages)
    assert "received 72/72" in stages[0] and "received 3/3" in stages[1]
    assert "Spark steps skipped (--no-spark)" in out.stdout


def test_demo_without_java_says_so_in_one_line_and_runs_the_rest(tmp_path):
    """PATH without java (and no JAVA_HOME): one line instead of a traceback; the other stages run."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path / "empty-bin")
    out = subprocess.run([sys.executable, "-m", "tidings.cli.main", "demo", "--data", str(tmp_path / "data"),
                          "--hosts", "3", "--rounds", "4"], capture_output=True, text=True, timeout=120, env=env,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0] == "Java 17 not found: Spark steps skipped, install a JDK"
    assert "Traceback" not in out.stdout + out.stderr and "Spark health stream" not in out.stdout
    stages = [line for line in out.stdout.splitlines() if " received " in line]
    assert len(stages) == 3 and all("(exactly once, in order)" in line for line in stages)


def test_durable_list_and_forget(broker):
    """A named durable subscription left behind (as by a stopped Spark query) is listed, and
    forgotten for good through the CLI; the name is refused when ambiguous, unknown or in use."""
    from tidings import sync

    b = ["--broker", broker.address]
    with sync.connect(broker.address, service="spark") as spark:
        spark.subscribe("load/#", filter="v > 1", durable="alerts").close()  # away, still held
    with sync.connect(broker.address, service="other") as other:
        other.subscribe("a/b", durable="alerts").close()
        held = other.subscribe("x/#", durable="busy")  # in use while this connection lives
        out = tidings("durable", "list", *b, "--json")
        assert out.returncode == 0, out.stderr
        listed = sorted((e["owner"], e["name"], e["pattern"], e["filter"], e["connected"])
                        for e in map(json.loads, out.stdout.splitlines()))
        assert listed == [("other", "alerts", "a/b", "", False), ("other", "busy", "x/#", "", True),
                          ("spark", "alerts", "load/#", "v > 1", False)]
        table = tidings("durable", "list", *b).stdout.splitlines()
        assert table[0].split() == ["owner", "name", "pattern", "filter", "state"] and len(table) == 4
        assert re.search(r"spark\s+alerts\s+load/#\s+v > 1\s+away since \d{4}-", "\n".join(table))
        out = tidings("durable", "forget", *b, "alerts")
        assert out.returncode == 2 and "several services (other, spark)" in out.stderr
        assert len(out.stderr.splitlines()) == 1
        out = tidings("durable", "forget", *b, "busy")
        assert out.returncode == 2 and "in use by a connection" in out.stderr
        out = tidings("durable", "forget", *b, "nothing-here")
        assert out.returncode == 2 and "no durable subscription named 'nothing-here'" in out.stderr
        out = tidings("durable", "forget", *b, "alerts", "--owner", "spark")
        assert out.returncode == 0, out.stderr
        assert "forgot durable subscription 'alerts' of 'spark'" in out.stdout
        held.close()
    out = tidings("durable", "list", *b, "--json")
    assert sorted((e["owner"], e["name"]) for e in map(json.loads, out.stdout.splitlines())) == [
        ("other", "alerts"), ("other", "busy")]
    assert broker.status()["durable_registrations"] == 2
