"""Limits per identity with a real broker: connections and subscriptions refused with one clear
error past their maximum, and a flooder met by backpressure: held to its publish rate without being
refused, at next to no cost to the broker, and another identity's publishing beside it as efficient
as alone.

The flood is measured in CPU time, not wall-clock rates, so that the load of the shared 2-core
machine does not decide it: the broker's cost is its process's utime + stime (/proc/PID/stat) over
a window, and the other identity's throughput is counted in its events per second of the broker's
CPU (what the flood takes from it), alone and beside the flood.
"""

import select
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
FLOOD_RATE = 1000  # events/s, the flooder's identity's limit
FLOOD_FACTOR = 30  # what the flooder offers: 30 times its limit
FLOOD_S_MAX = 30.0  # a flood stops when told to, or after this
FLOOD_WINDOW_S = 2.0  # the flood alone, for its cost to the broker
RUN_S = 2.0  # one turn of the steady publisher
TURNS = 3  # turns alone and beside the flood, in pairs
FLOOD_CPU_MAX = 0.05  # of one core
# A flooder on a raw socket. Each `g` on its stdin starts a flood: a new connection, then
# PUBLISHes of 100 events offered at FLOOD_FACTOR times its limit, as fast as the socket takes them
# (what the socket does not take is counted as offered and dropped: it keeps trying), every reply
# read. `s` ends it with a reset (SO_LINGER 0), so that what the kernel holds of it and the broker
# has not read is dropped, not read later, and prints what came of it; `q` (or EOF) ends the process.
FLOODER = r"""
import os, select, socket, struct, sys, time
from tidings.core.auth.credentials import NONCE_BYTES, parse_credential
from tidings.core.session.client_session import ClientSession
from tidings.core.wire import messages
address, credential, rate, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
host, port = address.rsplit(":", 1)

def flood():
    session = ClientSession("flood", "f", parse_credential(credential), os.urandom(NONCE_BYTES))
    sock = socket.create_connection((host, int(port)))
    sock.sendall(session.hello())
    welcome = False
    while not welcome:
        for msg in session.receive(sock.recv(65536)):
            if isinstance(msg, messages.Challenge):
                sock.sendall(session.answer(msg))
            welcome = welcome or isinstance(msg, messages.Welcome)
    sock.setblocking(False)
    events = [session.check_event("f/x", b"y" * 100)] * 100
    offered = written = accepted = refused = errors = 0
    out = wire = b""
    print("flooding", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        while offered < rate * (time.monotonic() - t0):
            offered += len(events)
            if len(out) < 1 << 20:  # the socket is not taking them: dropped, and offered again later
                (_, _, wire), = session.publish(events)
                out += wire
        if out:
            try:
                sent = sock.send(out)
                written += len(events) * sent / len(wire)
                out = out[sent:]
            except BlockingIOError:
                pass
        readable, _, _ = select.select([sock, 0], [], [], 0.005)
        if 0 in readable:
            break
        if sock in readable:
            for msg in session.receive(sock.recv(1 << 20)):
                if isinstance(msg, messages.Ack):
                    accepted += sum(t is not None for t in msg.ticks)
                    refused += sum(t is None for t in msg.ticks)
                errors += isinstance(msg, messages.Error)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    print(offered, int(written), accepted, refused, errors, time.monotonic() - t0, flush=True)

while (command := os.read(0, 1)) == b"g":
    flood()
    os.read(0, 1)  # the `s` that ended it
"""


class Flooder:
    """The FLOODER process, its floods one at a time."""

    def __init__(self, address: str, credential: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", FLOODER, address, credential,
                                      str(FLOOD_FACTOR * FLOOD_RATE), str(FLOOD_S_MAX)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.floods: list[list[float]] = []  # offered, written, accepted, refused, errors, seconds

    def _line(self) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        assert ready, "the flooder did not answer"
        return self.proc.stdout.readline()

    def start(self) -> None:
        self.proc.stdin.write("g")
        self.proc.stdin.flush()
        assert self._line() == "flooding\n"

    def stop(self) -> None:
        self.proc.stdin.write("s")
        self.proc.stdin.flush()
        self.floods.append([float(x) for x in self._line().split()])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


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
        a.status()  # a round trip on the same connection: its UNSUBSCRIBE was handled
        b.subscribe("x/4")  # room again
    assert broker.status()["auth"]["identities"]["few"]["refusals"] == 2


def steady_turn(broker, credential):
    """The steady identity publishing for RUN_S: (events, seconds, the broker's CPU seconds)."""
    with sync.connect(broker.address, credential=credential) as c:
        n, t0, cpu0 = 0, time.monotonic(), broker.cpu_seconds()
        while time.monotonic() - t0 < RUN_S:
            c.publish_many([("s/x", b"x" * 100)] * 100)
            n += 100
        return n, time.monotonic() - t0, broker.cpu_seconds() - cpu0


def test_a_flooder_meets_backpressure_costs_the_broker_little_and_slows_only_itself(limited):
    """A flooder offering 30 times its publish limit on a raw socket is held to its rate by not
    being read (nothing of it is refused), costs the broker at most 5 % of a core, and another
    identity publishing beside it keeps at least 90 % of the rate it has alone.

    Both in CPU time, so that the shared 2-core machine's other load (the flooder process itself
    among it) decides neither. The flood's cost is the broker process's CPU time (utime + stime,
    /proc/PID/stat) over a window of the flood alone, by the window's length. The other identity's
    rate is taken as what a broker core can do for it: its events per second of the broker's CPU
    spent on them (the broker's CPU over its turn, less the flood's cost over the same time),
    times the share of the core the flood leaves (1 - the flood's cost); over three turns alone and
    three beside the flood, in pairs. Each flood is its own connection, ended with a reset: the
    megabytes of it the kernel holds are dropped then, not read by the broker in the next turn
    alone."""
    broker, creds = limited
    steady_turn(broker, creds["steady"])  # warming up (the first turn is the slowest): not counted
    flooder = Flooder(broker.address, creds["flood"])
    solo, beside = [], []
    try:
        flooder.start()
        cpu0, t0 = broker.cpu_seconds(), time.monotonic()
        time.sleep(FLOOD_WINDOW_S)  # a measuring window: the flood alone
        flood_cpu = (broker.cpu_seconds() - cpu0) / (time.monotonic() - t0)
        flooder.stop()
        for _ in range(TURNS):  # in pairs, so that the machine's changing load weighs on both sides
            solo.append(steady_turn(broker, creds["steady"]))
            flooder.start()
            beside.append(steady_turn(broker, creds["steady"]))
            flooder.stop()
    finally:
        flooder.close()
    offered, written, accepted, refused, errors, seconds = (sum(f[k] for f in flooder.floods) for k in range(6))
    # over all turns of a side (/proc's CPU times are counted in 10 ms ticks: short turns would be noise)
    solo_rate = sum(n for n, _, _ in solo) / max(sum(cpu for _, _, cpu in solo), 0.01)
    beside_cpu = sum(cpu for _, _, cpu in beside) - flood_cpu * sum(wall for _, wall, _ in beside)
    beside_rate = sum(n for n, _, _ in beside) / max(beside_cpu, 0.01) * (1 - flood_cpu)
    report = (f"flood: offered {offered / seconds:.0f} ev/s, written {written / seconds:.0f} ev/s, accepted "
              f"{accepted / seconds:.0f} ev/s, refused {refused:.0f}; broker CPU {100 * flood_cpu:.1f} % of a core; "
              f"steady alone {statistics.median(n / wall for n, wall, _ in solo):.0f} ev/s, {solo_rate:.0f} ev per "
              f"broker CPU s; beside {statistics.median(n / wall for n, wall, _ in beside):.0f} ev/s, "
              f"{beside_rate:.0f} ev per broker CPU s")
    print(report)
    assert offered >= 0.8 * FLOOD_FACTOR * FLOOD_RATE * seconds, report  # it kept offering 30 times its limit
    assert refused == errors == 0, report  # backpressure, not refusal: the excess is not read (what the socket
    # took, `written`, waits in the kernel's buffers, several MB on loopback)
    # its rate, and for each flood its burst (1 s, refilled in between) and one PUBLISH
    assert accepted <= FLOOD_RATE * (seconds + len(flooder.floods)) + 100 * len(flooder.floods), report
    assert flood_cpu <= FLOOD_CPU_MAX, report
    assert beside_rate >= 0.9 * solo_rate, report
