"""`--from` spans the overlay: a read from the oldest event, or from a tick, through any broker of a
cluster returns every broker's events on the pattern, in each publisher's order, although nobody
subscribed to those channels while they were published (the trees had no members, so the pubends
had sent nothing on them: Source.activated tells the tree of each pubend when it gets members)."""

import json
import subprocess
import sys

import pytest

from tidings import sync
from tidings.testing import LOCAL_LIVENESS, Cluster

pytestmark = pytest.mark.integration


def sub(*args):
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", "sub", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_from_start_and_from_a_tick_read_every_brokers_events_through_any_broker(tmp_path):
    with Cluster(tmp_path / "cluster", 3, LOCAL_LIVENESS) as cluster:
        sent = {}
        for broker in cluster:
            with sync.connect(broker.address, follow_advice=False) as pub:
                results = pub.publish_many([("hist/x", b"v")] * 20)
                sent[results[0].pubend] = [r.tick for r in results]
        total = sum(len(t) for t in sent.values())
        for broker in cluster:
            out = sub("--broker", broker.address, "hist/#", "--from", "start", "--count", str(total), "--timeout", "30")
            assert out.returncode == 0, out.stderr
            got: dict[str, list[int]] = {}
            for line in out.stdout.splitlines():
                event = json.loads(line)
                got.setdefault(event["pubend"], []).append(event["tick"])
            assert got == sent  # every pubend's events, each in its order, once
        middle = min(t[10] for t in sent.values())
        out = sub("--broker", cluster[1].address, "hist/#", "--from", str(middle), "--count",
                  str(sum(1 for t in sent.values() for x in t if x > middle)), "--timeout", "30")
        assert out.returncode == 0, out.stderr
        assert all(json.loads(line)["tick"] > middle for line in out.stdout.splitlines())
