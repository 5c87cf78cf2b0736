"""bench/broker_threads.py's arithmetic on /proc readings (no broker): the main thread is the event
loop, every other thread is summed as `others`, threads born during the load count from zero, and
the figures are per event sent."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import broker_threads  # noqa: E402


def test_per_event_splits_the_loop_from_the_other_threads() -> None:
    tick_us = 1e6 / broker_threads.CLOCK_TICKS_PER_S
    before = {100: (10, 5, 7, 1), 101: (2, 2, 50, 0), 102: (0, 0, 3, 0)}
    after = {100: (30, 9, 27, 3), 101: (12, 8, 90, 2), 102: (0, 0, 3, 0), 103: (1, 0, 10, 0)}  # 103: new
    got = broker_threads.per_event(100, before, after, events=10)
    assert got["others_busy"] == 2  # 101 and 103 used CPU; 102 did not
    assert got["loop"] == {"user_us": round(20 * tick_us / 10, 2), "sys_us": round(4 * tick_us / 10, 2),
                           "cpu_us": round(24 * tick_us / 10, 2), "vcs": 2.0, "ivcs": 0.2}
    assert got["others"]["cpu_us"] == round((11 + 6) * tick_us / 10, 2)
    assert (got["others"]["vcs"], got["others"]["ivcs"]) == (5.0, 0.2)


def test_threads_reads_this_process() -> None:
    mine = broker_threads.threads(os.getpid())
    assert os.getpid() in mine and all(len(v) == 4 and min(v) >= 0 for v in mine.values())
