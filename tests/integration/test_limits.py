"""Limits per identity with a real broker: connections and subscriptions refused with one clear
error past their maximum, a flooder held to its publish rate by refusals and backpressure, and
another identity's throughput beside the flood close to its solo figure."""

import signal
import statistics
import subprocess
import sys
import time

import pytest

from tidings import sync
from tidings.aio.auth_file import add_identity
from tidings.core.auth.credentials import KdfParams
from tidings.core.errors import BrokerError
from tidings.testing import BrokerProcess

pytestmark = pytest.mark.integration
KDF = KdfParams(n=1 << 10)
FLOOD_RATE = 1000  # events/s
FLOOD_S_MAX = 40.0  # the flooder stops when its stdin closes, or after this
RUN_S = 1.5
FLOODER = r"""
import select, sys, time
from tidings import sync
from tidings.core.errors import BrokerError
ok = refused = 0
with sync.connect(sys.argv[1], credential=sys.argv[2]) as c:
    print("ready", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < float(sys.argv[3]) and not select.select([sys.stdin], [], [], 0)[0]:
        try:
            c.publish_many([("f/x", b"y" * 100)] * 500)
            ok += 500
        except BrokerError as e:
            refused += sum(isinstance(x, BrokerError) for x in e.results)
            ok += sum(not isinstance(x, BrokerError) for x in e.results)
    print(ok, refused, time.monotonic() - t0)
"""


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    auth = root / "auth.toml"
    creds = {name: str(add_identity(auth, name, [], ["#"], ["#"], KDF)) for name in ("steady", "flood", "few")}
    with auth.open("a") as fh:
        fh.write(f"\n[identities.flood.limits]\npublish_events_per_s = {FLOOD_RATE}\n"
                 "\n[identities.few.limits]\nconnections_max = 2\nsubscriptions_max = 3\n")
    with BrokerProcess(root / "b", args=["--auth", str(auth)], credential=creds["steady"]) as broker:
        yield broker, creds


def test_connections_and_subscriptions_past_their_maximum_are_refused(limited):
    broker, creds = limited
    with sync.connect(broker.address, credential=creds["few"]) as a, \
            sync.connect(broker.address, credential=creds["few"]) as b:
        with pytest.raises(BrokerError, match="connections_max=2") as err:
            sync.connect(broker.address, credential=creds["few"])
        assert err.value.code == "limit-exceeded"
        subs = [a.subscribe("x/1"), a.subscribe("x/2"), b.subscribe("x/3")]
        with pytest.raises(BrokerError, match="subscriptions_max=3"):
            b.subscribe("x/4")
        subs[0].close()
        b.subscribe("x/4")  # room again
    assert broker.status()["auth"]["identities"]["few"]["refusals"] == 2


def steady_rate(broker, credential):
    with sync.connect(broker.address, credential=credential) as c:
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < RUN_S:
            c.publish_many([("s/x", b"x" * 100)] * 100)
            n += 100
        return n / (time.monotonic() - t0)


def test_a_flooder_is_held_to_its_rate_and_slows_only_itself(limited):
    """The other identity's rate beside the flood and alone, measured in turns (the flooder is
    stopped with SIGSTOP for the solo turns), so that the machine's changing load weighs on both."""
    broker, creds = limited
    flooder = subprocess.Popen([sys.executable, "-c", FLOODER, broker.address, creds["flood"], str(FLOOD_S_MAX)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    solo, beside = [], []

    def turns(pairs):
        for _ in range(pairs):
            beside.append(steady_rate(broker, creds["steady"]))
            flooder.send_signal(signal.SIGSTOP)
            solo.append(steady_rate(broker, creds["steady"]))
            flooder.send_signal(signal.SIGCONT)
        return statistics.median(beside) >= 0.9 * statistics.median(solo)

    try:
        assert flooder.stdout.readline() == "ready\n"  # measured once its start-up is over
        # the bar, 10 %: on a shared 2-core machine one turn's spread alone can be that, so
        # when three pairs of turns miss it, three more are taken and all six judged
        within = turns(3) or turns(3)
        out = flooder.communicate("", timeout=60)[0]  # stdin closed: the flooder stops and reports
    finally:
        flooder.kill()
    ok, refused, seconds = out.split()
    accepted_per_s = int(ok) / float(seconds)
    solo_rate, beside_rate = statistics.median(solo), statistics.median(beside)
    print(f"steady solo {solo_rate:.0f} ev/s, beside the flood {beside_rate:.0f} ev/s; flooder accepted "
          f"{accepted_per_s:.0f} ev/s, refused {refused}")
    assert int(refused) > 0
    assert accepted_per_s <= FLOOD_RATE * 1.25 + 500 / float(seconds)  # its rate, its burst, one frame
    assert within, f"beside the flood {beside_rate:.0f} ev/s, alone {solo_rate:.0f} ev/s"
