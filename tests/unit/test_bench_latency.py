"""Test (d)'s helpers without a broker: the disk's fsync floor (bench/fsync_floor.py), the margin
above it that bench/run.py notes on each d line and bench/summarize.py tabulates, and the stall
detector of the load process (bench/stalls.py): its snapshots of this very process, its episodes
and the verdict its evidence gives."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import fsync_floor  # noqa: E402
import run  # noqa: E402
import stalls  # noqa: E402
import summarize  # noqa: E402


def test_fsync_floor_measures_each_append_and_leaves_nothing(tmp_path: Path) -> None:
    found = fsync_floor.measure(str(tmp_path), samples=40, rate_per_s=0, record_bytes=64)
    assert found["samples"] == 40
    assert 0 < found["p50_us"] <= found["p90_us"] <= found["p99_us"] <= found["max_us"]
    assert found["write_p50_us"] <= found["p50_us"]
    assert 0 < found["cpu_p50_us"] <= found["p50_us"] and found["cpu_p50_us"] <= found["cpu_p90_us"]  # CPU within wall
    assert found["call"] == "write+fsync"  # the floor
    # beside it, the log's pattern: pwrite over zeros written ahead, fdatasync
    assert 0 < found["prefilled_p50_us"] <= found["prefilled_p99_us"] <= found["prefilled_max_us"]
    assert 0 < found["prefilled_cpu_p50_us"] <= found["prefilled_p50_us"] and found["prefilled_fill_cpu_us"] > 0
    assert list(tmp_path.iterdir()) == []  # the probe's file is gone


def test_the_prefilled_pattern_writes_over_zeros_and_grows_only_past_them(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    log = fsync_floor.Prefilled(str(path))
    log.write(b"a" * 10)
    log.sync()  # past the (no) zeros: a full fsync, the size now durable
    assert (log.end, log.file_bytes) == (10, 10)
    log.fill()
    assert log.file_bytes == 10 + fsync_floor.PREFILL_CHUNK_BYTES and path.stat().st_size == log.file_bytes
    log.write(b"b" * 10)
    log.sync()
    assert path.stat().st_size == log.file_bytes and path.read_bytes()[:20] == b"a" * 10 + b"b" * 10
    os.close(log.fd)


def test_percentiles_are_nearest_rank_below_as_the_loads_take_them() -> None:
    s = fsync_floor.summary([float(x) for x in range(100, 0, -1)])  # 1..100, unsorted
    assert (s["p50_us"], s["p90_us"], s["p99_us"], s["max_us"]) == (51.0, 91.0, 100.0, 100.0)
    assert fsync_floor.summary([])["p50_us"] is None


def test_a_d_line_carries_the_round_floor_and_its_margin() -> None:
    line = {"broker": "tidings", "test": "d-best", "p50_us": 300.0, "p99_us": 900.0}
    run.over_floor(line, {"p50_us": 130.0, "p99_us": 700.0})
    assert line["over_fsync_p50_us"] == 170.0 and line["over_fsync_p99_us"] == 200.0
    assert (line["fsync_p50_us"], line["fsync_p99_us"]) == (130.0, 700.0)
    untouched = {"test": "d-best", "p50_us": 300.0}
    run.over_floor(untouched, None)
    run.over_floor(untouched, {"p50_us": None, "p99_us": None, "errors": ["no disk"]})
    assert "over_fsync_p50_us" not in untouched


def test_summary_shows_the_floor_and_judges_the_margin_against_the_target() -> None:
    rows = [{"test": "meta", "run_id": "r"}]
    for rnd, (p50, p99) in enumerate([(60.0, 250.0), (90.0, 400.0), (80.0, 280.0)], start=1):
        rows.append({"broker": "disk", "test": "fsync", "round": rnd, "run_id": "r", "value": 130.0,
                     "p50_us": 130.0, "p99_us": 700.0})
        rows.append({"broker": "tidings", "test": "d-best", "round": rnd, "run_id": "r", "value": 130.0 + p50,
                     "p50_us": 130.0 + p50, "p99_us": 700.0 + p99, "over_fsync_p50_us": p50, "over_fsync_p99_us": p99})
    text = summarize.render(rows)
    assert "| disk: write + fsync of one small record" in text
    assert ("| tidings best effort | 80 µs [60 µs\u201390 µs] | 280 µs [250 µs\u2013400 µs] "
            "| p50 within +100 µs; p99 within +300 µs |") in text
    assert "| floor" not in text  # no yardstick in this run: no line for one
    assert "| disk |" not in text  # the floor is no broker of the other tables
    rows[-1]["over_fsync_p50_us"] = 150.0
    rows[-3]["over_fsync_p50_us"] = 140.0
    assert "p50 over +100 µs" in summarize.render(rows)
    rows.append({"broker": "floor-prefilled", "test": "d-best", "round": 1, "run_id": "r", "value": 180.0,
                 "p50_us": 180.0, "p99_us": 900.0, "over_fsync_p50_us": 50.0, "over_fsync_p99_us": 200.0})
    assert ("| floor-prefilled best effort | 50 µs (n=1) | 200 µs (n=1) | p50 within +100 µs; p99 within +300 µs |"
            in summarize.render(rows))  # the yardstick beside tidings


def test_classify_names_the_largest_explanation_first() -> None:
    quiet = {"load_wait_ms": 0.1, "broker_wait_ms": 0.2, "broker_run_ms": 0.5, "steal_ms": 0.0,
             "disk_write_ms": 0, "disk_flush_ms": 1, "send_late_ms": 0.0}
    assert stalls.classify(10.0, quiet).startswith("neither process ran nor waited")
    both = {**quiet, "broker_wait_ms": 9.0, "load_wait_ms": 6.0}
    assert stalls.classify(10.0, both) == ("broker waited for a CPU (9.0 ms); "
                                           "load process waited for a CPU (6.0 ms)")
    assert stalls.classify(10.0, {**quiet, "disk_flush_ms": 40}) == "disk slow (writes/flushes) (40.0 ms)"
    assert stalls.classify(10.0, {**quiet, "steal_ms": 12.0}).startswith("CPU stolen by the hypervisor")
    assert stalls.classify(10.0, {**quiet, "load_wait_ms": 4.9}).startswith("neither")  # under half: no


def test_the_watch_merges_slow_reads_into_one_episode_with_its_evidence(tmp_path: Path) -> None:
    watch = stalls.StallWatch(os.getpid(), str(tmp_path), threshold_us=5000.0)
    try:
        t0 = time.perf_counter_ns()
        watch.read_done(t0, 300.0, 1, 130, 0)
        watch.sent_late(2_000_000)
        deadline = time.monotonic() + 5.0
        spent = time.thread_time_ns()
        while time.thread_time_ns() - spent < 20_000_000 and time.monotonic() < deadline:
            pass  # 20 ms of CPU in this process: the "broker" (this pid) is busy meanwhile
        watch.read_done(time.perf_counter_ns(), 21_000.0, 3, 390, 25_000_000)
        watch.read_done(time.perf_counter_ns(), 6_000.0, 1, 130, 26_000_000)
        watch.read_done(time.perf_counter_ns(), 400.0, 1, 130, 27_000_000)
        watch.read_done(time.perf_counter_ns(), 7_000.0, 1, 130, 40_000_000)
        found = watch.finish()
    finally:
        watch.close()
    assert found["samples_over"] == 5 and found["episodes_count"] == 2
    first, second = found["episodes"]
    assert (first["events"], first["reads"], first["bytes"], first["max_us"]) == (4, 2, 520, 21_000.0)
    assert first["t_ms"] == 25_000_000 / 1e6 - 21.0
    assert first["broker_run_ms"] >= 15.0 and first["load_run_ms"] >= 15.0  # both are this process
    assert first["send_late_ms"] == 2.0
    assert "broker busy" in first["verdict"]
    assert second["events"] == 1 and second["send_late_ms"] == 0.0
    # one verdict per episode, named by its largest explanation: on a busy machine this process's
    # wait for a CPU can outweigh its 20 ms of running (both are in the first verdict's text)
    assert sum(found["verdicts"].values()) == 2


def test_the_calls_compared_each_get_every_sample_and_leave_nothing(tmp_path: Path) -> None:
    calls = ["fsync", "fdatasync", "dsync", "prefilled", "writeback"]
    found = fsync_floor.compare_calls(str(tmp_path), calls, samples=20, rate_per_s=0, record_bytes=64, work_us=50)
    assert [f["call"] for f in found] == calls
    assert all(f["samples"] == 20 and 50 < f["p50_us"] <= f["max_us"] for f in found)  # the work is in each
    assert list(tmp_path.iterdir()) == []
    try:
        fsync_floor.compare_calls(str(tmp_path), ["fsync", "osync"], samples=1)
    except ValueError as exc:
        assert "osync" in str(exc)
    else:
        raise AssertionError("an unknown call was taken")
