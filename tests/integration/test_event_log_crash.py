"""kill -9 of a real process appending to the event log: every tick it acknowledged (printed after
`sync()` returned) is in the recovered log exactly once, in order, and the log goes on after."""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.event_log_child import payload_for
from tidings.storage import EventLog

pytestmark = pytest.mark.integration

CHILD = os.path.join(os.path.dirname(__file__), "event_log_child.py")
SEGMENT_BYTES_MAX = 16 << 10
ROUNDS = 4
ROUND_SECONDS_MAX = 10.0


class Child:
    """The appending process, and the lines it printed so far."""

    def __init__(self, directory, seed, stderr_path, mode="0"):
        self.stderr_path = stderr_path
        with open(stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, CHILD, str(directory), str(seed), str(SEGMENT_BYTES_MAX), mode],
                stdout=subprocess.PIPE, stderr=stderr,
            )
        self._pending = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)

    def read_lines(self, count, deadline):
        """The next `count` lines, waiting for them no later than `deadline` (time.monotonic)."""
        lines = []
        while len(lines) < count:
            if b"\n" in self._pending:
                line, self._pending = self._pending.split(b"\n", 1)
                lines.append(line.decode())
                continue
            left = deadline - time.monotonic()
            assert left > 0, f"child too slow; stderr: {self.stderr()}"
            if self._selector.select(timeout=left):
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                assert chunk, f"child exited early; stderr: {self.stderr()}"
                self._pending += chunk
        return lines

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL
        self._selector.close()
        self.proc.stdout.close()

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")


def check_recovered(directory, acked):
    """Every acknowledged tick present once and in order, with its payload; returns the last tick."""
    with EventLog.open(directory, segment_bytes_max=SEGMENT_BYTES_MAX) as log:
        records = log.read(0, 1 << 40)
        ticks = [t for t, _ in records]
        assert ticks == sorted(set(ticks)), "each record once, in tick order"
        assert all(payload == payload_for(t) for t, payload in records)
        present = set(ticks)
        missing = [t for t in acked if t not in present]
        assert missing == [], f"{len(missing)} acknowledged ticks lost, e.g. {missing[:5]}"
        assert log.last_tick == ticks[-1] and log.record_count == len(ticks)
        # the recovered log takes new appends, and they are durable too
        tick = log.last_tick + 1
        log.append([(tick, payload_for(tick))])
        log.sync()
    return tick


@pytest.mark.parametrize("seed,mode", [(1, "0"), (2, "0"), (3, "0"), (4, "1"), (5, "1"), (6, "1")])
def test_kill_9_while_appending_loses_no_synced_record(tmp_path, seed, mode):
    """Mode 1: appends go over zeros written ahead of them, synced with fdatasync."""
    rng = random.Random(seed)
    directory = tmp_path / "log"
    acked: list[int] = []
    for round_number in range(ROUNDS):
        deadline = time.monotonic() + ROUND_SECONDS_MAX
        child = Child(directory, seed * 100 + round_number, tmp_path / f"child{round_number}.err", mode)
        try:
            ready = child.read_lines(1, deadline)[0]
            assert ready == f"ready {acked[-1] if acked else 0}", ready
            for line in child.read_lines(rng.randint(0, 120), deadline):
                acked.extend(int(t) for t in line.split())
        finally:
            child.kill()  # at a random point of the batches that follow the last line read
        acked.append(check_recovered(directory, acked))
    assert acked == sorted(set(acked)), "ticks stay monotonic across restarts"
    assert len(acked) > ROUNDS
