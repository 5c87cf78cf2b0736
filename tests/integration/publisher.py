"""A publisher thread for tests that restart brokers under load: it keeps publishing to whatever
address `target` names, reconnects after every failure, and records each acknowledged event."""

import threading
import time

from tidings import sync
from tidings.core.errors import TidingsError

RETRY_S = 0.05
CONNECT_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 5.0


class Publisher(threading.Thread):
    def __init__(self, target, channel="ops/load"):
        super().__init__(name="test-publisher", daemon=True)
        self.target = target  # the address to publish to; the test may change it at any time
        self.channel = channel
        self.acked = []  # (pubend, tick, payload) of every acknowledged event, in ack order
        self.failures = 0
        self._halt = threading.Event()
        self._sent = 0

    def run(self):
        while not self._halt.is_set():
            try:
                # it stays with its broker (no route advice): the tests check that broker's log
                with sync.connect(self.target, service="test-publisher", timeout=CONNECT_TIMEOUT_S,
                                  request_timeout=REQUEST_TIMEOUT_S, follow_advice=False) as client:
                    while not self._halt.is_set():
                        self._sent += 1
                        payload = f"e{self._sent}"
                        res = client.publish(self.channel, payload)
                        self.acked.append((res.pubend, res.tick, payload))
            except (TidingsError, OSError, TimeoutError):
                self.failures += 1
                self._halt.wait(RETRY_S)

    def wait_acks(self, more, timeout=60.0):
        """Wait until `more` events beyond those acknowledged now are acknowledged."""
        goal = len(self.acked) + more
        deadline = time.monotonic() + timeout
        while len(self.acked) < goal:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.acked)} of {goal} acks within {timeout} s "
                                   f"({self.failures} failures)")
            time.sleep(0.02)

    def stop(self):
        self._halt.set()
        self.join(30)
        assert not self.is_alive()


def read_from_start(address, channel, through):
    """Every event of `channel` in the broker's log from the start up to tick `through`, as
    `tidings sub CHANNEL --from start` returns them: (pubend, tick, payload)."""
    with sync.connect(address, service="test-reader") as client, \
            client.subscribe(channel, start="start", end=through) as sub:
        return [(e.pubend, e.tick, e.payload.decode()) for e in sub]


def assert_no_acked_event_lost(publisher, address):
    """Every event `publisher` got an ack for is in the log at `address`, once, in tick order."""
    pubends = {p for p, _, _ in publisher.acked}
    assert len(pubends) == 1, f"acks came from several pubends: {pubends}"
    through = max(t for _, t, _ in publisher.acked)
    read = read_from_start(address, publisher.channel, through)
    ticks = [t for _, t, _ in read]
    assert ticks == sorted(set(ticks)), "ticks repeat or go backwards"
    missing = set(publisher.acked) - set(read)
    assert not missing, f"{len(missing)} of {len(publisher.acked)} acknowledged events lost: {sorted(missing)[:5]}"
    return len(publisher.acked), len(read)
