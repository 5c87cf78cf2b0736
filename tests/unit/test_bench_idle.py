"""bench/broker_idle.py's reading of perf's scheduler events (no perf, no broker): the broker is
asleep only while every working thread is, each stretch counted by what its threads waited for
and what ended it."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import broker_idle  # noqa: E402

LOOP, WRITER, PUBLISHER, KWORKER = 100, 101, 200, 7


def switch(at: float, prev: int, state: str, nxt: int, cpu: int = 0) -> str:
    return (f"  tidings {LOOP}/{prev} [{cpu:03d}] {at:.6f}: sched:sched_switch: prev_comm=tidings prev_pid={prev} "
            f"prev_prio=120 prev_state={state} ==> next_comm=x next_pid={nxt} next_prio=120")


def wakeup(at: float, waker: int, target: int, cpu: int = 1) -> str:
    return (f"  x {waker}/{waker} [{cpu:03d}] {at:.6f}: sched:sched_wakeup: comm=tidings pid={target} "
            f"prio=120 target_cpu=000")


def test_asleep_stretches_by_what_they_waited_for_and_what_ended_them() -> None:
    lines = [
        switch(10.000, LOOP, "S", WRITER),  # the loop waits; the writer still runs
        switch(10.001, WRITER, "D", 0),  # the writer in fsync: the broker asleep from here
        wakeup(10.003, KWORKER, WRITER),  # the disk ends it (2 ms)
        switch(10.004, WRITER, "S", 0),  # nothing to do at all
        wakeup(10.007, PUBLISHER, LOOP),  # until the publisher writes (3 ms)
        switch(10.010, LOOP, "R+", WRITER),  # preempted: runnable, not asleep
        switch(10.011, WRITER, "S", LOOP),
        wakeup(10.020, PUBLISHER, WRITER),  # (not asleep: the loop was runnable all along)
        "a line perf prints that is no event",
    ]
    got = broker_idle.asleep_in("\n".join(lines), LOOP, [LOOP, WRITER], {PUBLISHER: "publisher"})
    assert got["span_ms"] == 20.0 and got["asleep_pct"] == 25.0
    assert got["asleep"] == {
        "all in S; ended: loop woken by publisher": {"pct": 15.0, "stretches": 1, "mean_us": 3000},
        "a log thread in D (the disk); ended: log thread woken by other": {"pct": 10.0, "stretches": 1,
                                                                           "mean_us": 2000},
    }
