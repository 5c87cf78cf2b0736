"""Durable subscriptions with real processes: a subscriber killed over and over, its broker killed
too, resuming on another broker each time from the token it stored with its own output, receives
every acknowledged event exactly once and in each publisher's order."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.publisher import Publisher
from tidings.testing import LOCAL_LIVENESS, Cluster, wait_for

pytestmark = pytest.mark.integration

CONSUMER = Path(__file__).with_name("durable_consumer.py")
ROUNDS = 6


def lines(path):
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def start_consumer(address, out):
    proc = subprocess.Popen([sys.executable, str(CONSUMER), address, "dur/#", str(out)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n", "the consumer did not subscribe"
    return proc


def progress_report(cluster, publishers, out, consumer):
    """Where things stand when the consumer stops making progress (seen once in a fresh clone, on
    a quiet machine, and not again in 35 runs): are the publishers still acknowledged, is the
    consumer alive, and what each broker holds."""
    brokers = {}
    for address, st in cluster.statuses().items():
        brokers[address] = None if st is None else {
            key: st.get(key) for key in ("last_tick", "subscriptions", "subscriptions_live", "durable_registrations",
                                         "durable_away", "paused_publishers", "pending_sync_bytes")} | {
            "nacks_sent": st.get("delivery", {}).get("nacks_sent"),
            "trees": [(t.get("name"), t.get("role"), t.get("parent"), t.get("children"))
                      for t in st.get("trees", [])][:4]}
    got = lines(out)
    return json.dumps({"publishers_acked": [len(p.acked) for p in publishers],
                       "publisher_failures": [p.failures for p in publishers],
                       "consumer_exit": consumer.poll(), "consumer_lines": len(got),
                       "last_line": got[-1] if got else None, "brokers": brokers}, default=str)


def test_a_durable_subscriber_killed_over_and_over_resumes_on_other_brokers_exactly_once(tmp_path):
    out = tmp_path / "consumer.jsonl"
    with Cluster(tmp_path / "cluster", 5, LOCAL_LIVENESS) as cluster:
        homes = [cluster[2], cluster[3], cluster[4]]  # where the subscriber connects, in turn
        consumer = start_consumer(homes[0].address, out)
        publishers = [Publisher(cluster[0].address, "dur/a"), Publisher(cluster[1].address, "dur/b/c")]
        for p in publishers:
            p.start()
        try:
            for round_ in range(1, ROUNDS + 1):
                seen = len(lines(out))
                try:
                    wait_for(lambda seen=seen: len(lines(out)) >= seen + 50, 30, what="the consumer made progress")
                except TimeoutError as exc:
                    raise TimeoutError(f"{exc} in round {round_}: "
                                       f"{progress_report(cluster, publishers, out, consumer)}") from None
                consumer.send_signal(signal.SIGKILL)
                consumer.wait(10)
                home = homes[round_ % len(homes)]
                if round_ % 2 == 0:  # also kill -9 the broker it was on, and bring it back
                    old = homes[(round_ - 1) % len(homes)]
                    old.kill()
                    old.start()
                consumer = start_consumer(home.address, out)
        finally:
            for p in publishers:
                p.stop()
        acked = {(pubend, tick) for p in publishers for pubend, tick, _ in p.acked}
        assert len(acked) > 500

        def complete():
            got = {(line["pubend"], line["tick"]) for line in lines(out) if "pubend" in line}
            return acked <= got
        try:
            wait_for(complete, 60, what="every acknowledged event reached the consumer")
        finally:
            consumer.send_signal(signal.SIGKILL)
            consumer.wait(10)
    got = [(line["pubend"], line["tick"]) for line in lines(out) if "pubend" in line]
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} events delivered twice"
    for pubend in {p for p, _ in got}:
        ticks = [t for p, t in got if p == pubend]
        assert ticks == sorted(ticks), f"events of {pubend} out of order"
    assert set(got) == acked  # nothing else: every delivered event was acknowledged to its publisher
    print(f"{len(acked)} acknowledged events, each delivered once, over {ROUNDS} kills of the subscriber")
