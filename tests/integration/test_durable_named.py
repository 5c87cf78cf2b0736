"""Broker-held durable subscriptions (JMS style, `durable="NAME"`, `tidings sub --durable NAME`):
the broker keeps the position under (service, name) across disconnections and a kill -9, resumes
after what was acknowledged (so what was delivered and not acknowledged comes again), and refuses
another pattern, a second connection, or a bad name with a clear error."""

import json
import subprocess
import sys
import time

import pytest

from tidings import sync
from tidings.core.durable.registrations import Registrations
from tidings.core.errors import BrokerError
from tidings.testing import LOCAL_LIVENESS, Cluster, wait_for

pytestmark = pytest.mark.integration


def publish(pub, n, channel="nm/a"):
    return [r.tick for r in pub.publish_many([(channel, b"x")] * n)]


def ticks(sub, n):
    out = []
    while len(out) < n:
        event = sub.get(timeout=20)
        assert event is not None
        out.append(event.tick)
    return out


def saved(broker, pubend):
    """What the broker's saved durable state (its file, not its word) holds as acknowledged of
    `pubend` by each named subscription."""
    path = broker.data / "durable.state"
    if not path.exists():
        return {}
    regs = Registrations.decode(path.read_bytes(), 1, 1000)
    return {r.name: r.released.position(pubend) for r in (regs.get(n) for n in range(1, 100)) if r and r.name}


def test_a_named_durable_subscription_resumes_after_what_it_acknowledged_even_after_a_kill(tmp_path):
    with Cluster(tmp_path / "cluster", 2, LOCAL_LIVENESS) as cluster:
        origin, home = cluster[0], cluster[1]
        with sync.connect(origin.address, follow_advice=False) as pub:
            with sync.connect(home.address, service="jobs", follow_advice=False) as client:
                sub = client.subscribe("nm/#", durable="worker")
                first = publish(pub, 5)
                assert ticks(sub, 5) == first
                sub.ack()
                wait_for(lambda: saved(home, origin.pubend).get(("jobs", "worker"), 0) >= first[-1], 10,
                         what="the acknowledged position was saved")
            away = publish(pub, 5)  # published while it is away
            home.kill()  # the name and its position are saved
            home.start()
            with sync.connect(home.address, service="jobs", follow_advice=False) as client:
                sub = client.subscribe("nm/#", durable="worker")
                sub.auto_ack = False
                assert ticks(sub, 2) == away[:2]  # taken, never acknowledged
            with sync.connect(home.address, service="jobs", follow_advice=False) as client:
                sub = client.subscribe("nm/#", durable="worker")
                assert ticks(sub, 5) == away  # after the last ack: the two come again
                with sync.connect(home.address, service="jobs", follow_advice=False) as other:
                    with pytest.raises(BrokerError, match="in use"):
                        other.subscribe("nm/#", durable="worker")
                    with pytest.raises(BrokerError, match="exists with pattern"):
                        other.subscribe("nm/b/#", durable="worker")
                    with pytest.raises(BrokerError, match="name"):
                        other.subscribe("nm/#", durable="x" * 300)
                    # another service has its own names
                with sync.connect(home.address, service="other", follow_advice=False) as other:
                    assert other.subscribe("nm/#", durable="worker") is not None
                sub.close(forget=True)  # ends it for good
                wait_for(lambda: ("jobs", "worker") not in saved(home, origin.pubend), 10,
                         what="the ended subscription left the saved state")
            assert list(saved(home, origin.pubend)) == [("other", "worker")]


def test_a_named_durable_subscription_back_after_the_skew_allowance_gets_what_was_published_meanwhile(tmp_path):
    """A pubend it had never heard from before it left: its events published while it was away come
    from the registration's checkpoint, not from "now" less the clock skew allowance (1 s). Resumed
    more than that after them (a CLI started on a loaded machine), they were skipped."""
    with Cluster(tmp_path / "cluster", 2, LOCAL_LIVENESS) as cluster:
        origin, home = cluster[0], cluster[1]
        with sync.connect(origin.address, follow_advice=False) as pub:
            with sync.connect(home.address, service="jobs", follow_advice=False) as client:
                client.subscribe("nm/#", durable="late")  # registered, then away
            away = publish(pub, 4)
            allowance_us = 1_000_000  # defaults.CLOCK_SKEW_ALLOWANCE_NS
            wait_for(lambda: time.time_ns() // 1000 > away[-1] + 2 * allowance_us, 10,
                     what="the wall clock is past the events by more than the allowance")
            with sync.connect(home.address, service="jobs", follow_advice=False) as client:
                sub = client.subscribe("nm/#", durable="late")
                assert ticks(sub, 4) == away


def tidings(*args):
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_sub_durable_name_goes_on_after_the_last_line_printed(tmp_path):
    with Cluster(tmp_path / "cluster", 2, LOCAL_LIVENESS) as cluster:
        origin, home = cluster[0], cluster[1]
        b = ["--broker", home.address, "--service", "cli-jobs"]
        with sync.connect(origin.address, follow_advice=False) as pub:
            first = tidings("sub", *b, "nm/#", "--durable", "tail", "--count", "1", "--timeout", "1")
            assert first.returncode == 4, first.stderr  # nothing yet: timed out, but registered
            sent = publish(pub, 4)
            run1 = tidings("sub", *b, "nm/#", "--durable", "tail", "--count", "3")
            assert run1.returncode == 0, run1.stderr
            run2 = tidings("sub", *b, "nm/#", "--durable", "tail", "--count", "1")
            assert run2.returncode == 0, run2.stderr
            got = [json.loads(line)["tick"] for line in (run1.stdout + run2.stdout).splitlines()]
            assert got == sent
            both = tidings("sub", *b, "nm/#", "--durable", "tail", "--token", str(tmp_path / "t"))
            assert both.returncode != 0 and "one" in both.stderr
