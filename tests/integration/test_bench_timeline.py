"""bench/d_timeline.py: a (d) event's spans inside a broker, cut from its system calls.

The cut is checked on a made-up `perf script` trace (every span, an event that waited before its
sync, another thread's calls, a send before the sync), then run for real on tidings and the C
yardstick with a short load when this machine lets perf trace system calls: most of the events
timed, their spans consistent, the writeback span tidings' alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import d_timeline  # noqa: E402

pytestmark = pytest.mark.integration

EVENTS = 300
TIMEOUT_S = 180


def _trace(calls: list[tuple[int, float, int, int | None, float]]) -> list[str]:
    """`perf script` lines for (tid, enter µs, NR, fd, exit µs)."""
    lines = []
    for tid, enter, nr, fd, done in calls:
        args = f" ({fd:x}, 0, 0)" if fd is not None else " (0, 0)"
        lines.append(f"  python {tid} [000] {enter / 1e6:.6f}: raw_syscalls:sys_enter: NR {nr}{args}")
        lines.append(f"  python {tid} [000] {done / 1e6:.6f}:  raw_syscalls:sys_exit: NR {nr} = 0")
    return lines


def test_the_spans_of_each_event_are_cut_from_the_thread_that_fsyncs() -> None:
    lines = _trace([
        (7, 100, 281, 3, 1000),  # the loop's wait returns at 1000 µs
        (8, 1001, 18, 9, 1003),  # another thread's pwrite: not the loop's
        (7, 1010, 0, 12, 1012),  # read the PUBLISH
        (7, 1060, 18, 20, 1065),  # the log write
        (7, 1066, 277, 20, 1090),  # sync_file_range
        (7, 1150, 75, 20, 1260),  # fdatasync
        (7, 1270, 1, 12, 1290),  # the first send
        (7, 1291, 1, 13, 1295),  # the second: not timed
        (7, 1400, 18, 20, 1405),  # a log write with no wait since the last event: not timed
        (7, 1410, 75, 20, 1500),
        (7, 1510, 1, 12, 1520),
        (7, 1600, 281, 3, 2000),  # the next wake
        (7, 2050, 18, 20, 2055),  # a log write ...
        (7, 2060, 281, 3, 2500),  # ... then a wait before its sync: not an event of (d)
        (7, 2510, 1, 12, 2520),  # a send with nothing written: nothing
        (7, 2600, 18, 20, 2610),  # an event from the wake at 2500
        (7, 2700, 75, 20, 2800),
        (7, 2810, 1, 12, 2820),
        (7, 2900, 281, 3, 3000),
        (7, 3004, 1, 20, 3010),  # a write (not pwrite) to the log, no writeback: the floor's pattern
        (7, 3011, 74, 20, 3200),
        (7, 3201, 44, 12, 3230),
    ])
    threads = d_timeline.calls_by_thread(lines)
    assert {tid: len(calls) for tid, calls in threads.items()} == {7: 21, 8: 1}
    events = d_timeline.timelines(threads[7])
    assert events == [
        {"wake_to_log_write": 60, "log_write": 5, "writeback": 24, "log_write_to_sync": 60, "sync": 110,
         "sync_to_first_send": 10, "first_send": 20, "wake_to_first_send": 290},
        {"wake_to_log_write": 100, "log_write": 10, "log_write_to_sync": 90, "sync": 100, "sync_to_first_send": 10,
         "first_send": 10, "wake_to_first_send": 320},
        {"wake_to_log_write": 4, "log_write": 6, "log_write_to_sync": 1, "sync": 189, "sync_to_first_send": 1,
         "first_send": 29, "wake_to_first_send": 230},
    ]
    summary = d_timeline.summary(events)
    assert summary["wake_to_first_send"] == {"p50": 290.0, "p90": 320.0}  # (nearest rank, as loads.py)
    assert summary["writeback"] == {"p50": 24.0, "p90": 24.0}


def test_tidings_and_the_yardstick_timed_for_real(tmp_path: Path) -> None:
    missing = d_timeline.perf_missing()
    if missing:
        pytest.skip(missing)
    brokers = "tidings,floor-prefilled"
    env = {**os.environ, "TIDINGS_BENCH_DIR": str(tmp_path / "bench")}
    (tmp_path / "bench").mkdir()
    proc = subprocess.run([sys.executable, str(BENCH / "d_timeline.py"), "--brokers", brokers, "--count", str(EVENTS),
                           "--quiet-wait-s", "0"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=env)
    if proc.returncode != 0 and "no C compiler" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["broker"] for r in lines] == brokers.split(",")
    for r in lines:
        assert r["errors"] == [] and r["sent"] == EVENTS
    tidings, floor = lines
    assert floor["loop_syncs"] >= EVENTS and floor["events"] >= EVENTS / 2, floor  # one thread, one fsync each
    assert "writeback" not in floor["spans_us"]
    if tidings["loop_syncs"] < EVENTS / 3:  # slow fsyncs here: its writer thread took the commits
        pytest.skip(f"tidings' loop made {tidings['loop_syncs']} of its commits: too few to time here")
    assert "writeback" in tidings["spans_us"]
    for r in lines:
        # not one per fsync: two PUBLISHes read at one wake are one timeline
        assert r["events"] >= r["loop_syncs"] / 3, r
        spans = r["spans_us"]
        assert 0 < spans["wake_to_log_write"]["p50"] <= spans["wake_to_first_send"]["p50"]
        assert 0 < spans["sync"]["p50"] < spans["wake_to_first_send"]["p50"]
        for span in spans.values():
            assert 0 <= span["p50"] <= span["p90"]
