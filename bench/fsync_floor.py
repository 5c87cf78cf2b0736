#!/usr/bin/env python3
"""The disk's own fsync latency: the floor under tidings' latency in test (d).

tidings delivers and acknowledges an event only after the log writer has written it and fsynced
the log (docs/benchmarks.md, "What durable means"), so at 1,000 events/s, where every PUBLISH is
its own group commit, no (d) figure can be below what the file system takes for one small append
and its fsync. This measures exactly that pattern, in a directory on the same file system as the
broker's data: append one record of `record_bytes` to a file opened for appending, then fsync it
(os.fsync, as storage/log.py does), `samples` times, paced at `rate_per_s` as (d) paces its events
(an fsync right after another can be faster or slower than one after an idle millisecond).

  python bench/fsync_floor.py [--dir DIR] [--samples 3000] [--rate 1000] [--record-bytes 140]
                              [--calls fsync,fdatasync,dsync,prefilled,writeback] [--work-us 0]

The line also gives the CPU time the probing thread spent in each pair (`cpu_p50_us`, `cpu_p90_us`,
CLOCK_THREAD_CPUTIME_ID): a broker's CPU per event in (d) includes its log writer's fsync, and on a
virtual disk that is not only waiting (docs/benchmarks.md, "(d) above the disk's fsync").

bench/run.py calls `measure` once per round before the brokers, in $TIDINGS_BENCH_DIR/runs, and
records the line with test "fsync" (broker "disk"); summarize.py shows tidings' (d) above it.
The append+fsync pattern stays the floor (issue 21's (d) line is measured against it). The same
line also carries, as `prefilled_*`, the pattern the log uses now (storage/log.py, "Writing into
space already written"): a second pass of as many samples, each a pwrite over zeros written
ahead and an fdatasync, with the zeros written and fsynced between samples in the log's chunks
(PREFILL_CHUNK_BYTES, kept at most PREFILL_BYTES_MAX_DEFAULT ahead), as the idle log writer does;
`prefilled_fill_cpu_us` is those writes' CPU spread over the samples.

`--calls` compares ways of making the append durable, interleaved sample by sample (each in a file
of its own, the order turned every sample) so that the machine's drift falls on all of them: `fsync`
(write, then os.fsync: the floor), `fdatasync` (write, then os.fdatasync: the data and the size,
not the timestamps), `dsync` (one write on a descriptor opened O_DSYNC), `prefilled` (pwrite over
zeros written ahead, then os.fdatasync: the log's pattern, the zeros written between samples and
their CPU not counted in the sample), `writeback` (as `prefilled`, with the kernel asked to begin
writing the record at once, storage/files.py `start_writeback`, as the loop's commit does since stop
31). `--work-us N` spins N us of CPU between every call's write and its sync, standing in for
the core's answer to the sync, which the loop's commit works out while the disk writes: compare
`prefilled` and `writeback` with it. One JSON line per call.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

try:
    from tidings.storage.files import start_writeback
except ImportError:  # an older checkout: no early writeback
    def start_writeback(fd: int, offset: int, length: int) -> bool:
        return False
try:
    from tidings.storage.log import PREFILL_BYTES_MAX_DEFAULT, PREFILL_CHUNK_BYTES
except ImportError:  # an older checkout's log (bench/compare.py, A/B runs): measure the same pattern
    PREFILL_BYTES_MAX_DEFAULT, PREFILL_CHUNK_BYTES = 2 << 20, 256 << 10

# One event of (d): 100 bytes of payload, its channel and the record's header and CRC.
RECORD_BYTES = 140
SAMPLES = 3000
RATE_PER_S = 1000.0
FILE_BYTES_MAX = 64 << 20  # start a new file past this (the log rolls its segments too)


def percentile_us(sorted_us: list[float], p: float) -> float | None:
    """The p-th percentile of sorted microseconds, as bench/loads.py takes them (nearest rank below)."""
    if not sorted_us:
        return None
    return round(sorted_us[min(len(sorted_us) - 1, int(p / 100 * len(sorted_us)))], 1)


def summary(samples_us: list[float]) -> dict[str, Any]:
    """p50/p90/p99/p99.9/max of the samples (unsorted), in microseconds."""
    s = sorted(samples_us)
    return {"samples": len(s), "p50_us": percentile_us(s, 50), "p90_us": percentile_us(s, 90),
            "p99_us": percentile_us(s, 99), "p999_us": percentile_us(s, 99.9),
            "max_us": round(s[-1], 1) if s else None}


class Prefilled:
    """A file written as the log writes its active segment: records pwritten over zeros written
    ahead (a chunk at a time, fsynced, while at least half a chunk is missing), made durable with
    fdatasync. `fill` is the idle writer's part, `write` and `sync` a commit's."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR)
        self.end = 0  # the records' end
        self.file_bytes = 0
        self.fill_cpu_ns = 0
        self._zeros = bytes(PREFILL_CHUNK_BYTES)

    def fill(self) -> None:
        room = min(self.end + PREFILL_BYTES_MAX_DEFAULT, FILE_BYTES_MAX) - self.file_bytes
        if room < PREFILL_CHUNK_BYTES // 2:
            return
        c0 = time.thread_time_ns()
        size = min(room, PREFILL_CHUNK_BYTES)
        os.pwrite(self.fd, self._zeros[:size], self.file_bytes)
        os.fsync(self.fd)
        self.file_bytes += size
        self.fill_cpu_ns += time.thread_time_ns() - c0

    def write(self, record: bytes, writeback: bool = False) -> None:
        if self.end + len(record) > FILE_BYTES_MAX:  # a new segment: back to the start of a fresh file
            os.ftruncate(self.fd, 0)
            os.fsync(self.fd)
            self.end = self.file_bytes = 0
        os.pwrite(self.fd, record, self.end)
        if writeback:
            start_writeback(self.fd, self.end, len(record))
        self.end += len(record)

    def sync(self) -> None:
        if self.end > self.file_bytes:  # past the zeros: the size changes, a full fsync
            os.fsync(self.fd)
            self.file_bytes = self.end
        else:
            os.fdatasync(self.fd)


def measure(directory: str, samples: int = SAMPLES, rate_per_s: float = RATE_PER_S,
            record_bytes: int = RECORD_BYTES, prefilled: bool = True) -> dict[str, Any]:
    """Append + fsync `samples` times in a fresh file under `directory` (removed after); the
    latency of each pair (write and fsync together: what the log writer does per group commit).
    With `prefilled`, then as many samples of the log's pattern (`Prefilled`), as `prefilled_*`."""
    out = _measure(directory, samples, rate_per_s, record_bytes, False)
    if prefilled:
        other = _measure(directory, samples, rate_per_s, record_bytes, True)
        out.update({f"prefilled_{k}": other[k] for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us",
                                                          "cpu_p50_us", "cpu_p90_us", "fill_cpu_us")})
    return out


def _measure(directory: str, samples: int, rate_per_s: float, record_bytes: int,
             prefilled: bool) -> dict[str, Any]:
    interval_ns = int(1e9 / rate_per_s) if rate_per_s > 0 else 0
    record = os.urandom(record_bytes)
    write_us: list[float] = []
    total_us: list[float] = []
    cpu_us: list[float] = []  # the thread's CPU time in each pair: on a VM an fsync costs CPU, not only time
    os.makedirs(directory, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix="fsync-floor-", suffix=".log", dir=directory)
    log = None
    try:
        os.close(fd)
        if prefilled:
            log = Prefilled(path)
            fd = log.fd
        else:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        written = 0
        t_next = time.perf_counter_ns()
        for _ in range(samples):
            if interval_ns:
                pause_ns = t_next - time.perf_counter_ns()
                if pause_ns > 0:
                    time.sleep(pause_ns / 1e9)  # pacing the load, as (d) paces its events
                t_next += interval_ns
            t0 = time.perf_counter_ns()
            c0 = time.thread_time_ns()
            if log is not None:
                log.write(record)
            else:
                os.write(fd, record)
            t1 = time.perf_counter_ns()
            if log is not None:
                log.sync()
            else:
                os.fsync(fd)
            cpu_us.append((time.thread_time_ns() - c0) / 1000)  # inside the wall span: never more than it
            t2 = time.perf_counter_ns()
            write_us.append((t1 - t0) / 1000)
            total_us.append((t2 - t0) / 1000)
            if log is not None:
                log.fill()  # the idle writer's, after the commit was reported: not in the sample
                continue
            written += record_bytes
            if written >= FILE_BYTES_MAX:
                os.ftruncate(fd, 0)
                os.fsync(fd)
                written = 0
        os.close(fd)
    finally:
        os.unlink(path)
    out = summary(total_us)
    cpu = summary(cpu_us)
    out.update({"write_p50_us": summary(write_us)["p50_us"], "cpu_p50_us": cpu["p50_us"],
                "cpu_p90_us": cpu["p90_us"], "record_bytes": record_bytes,
                "rate_per_s": rate_per_s, "dir": directory,
                "call": "pwrite over zeros+fdatasync" if log is not None else "write+fsync"})
    if log is not None:
        out["fill_cpu_us"] = round(log.fill_cpu_ns / 1000 / max(samples, 1), 1)
    return out


CALLS = ("fsync", "fdatasync", "dsync", "prefilled", "writeback")
PREFILLED_CALLS = ("prefilled", "writeback")


def spin_us(us: float) -> None:
    """Busy CPU for `us` microseconds (the work a commit does between its write and its fsync)."""
    until = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < until:
        pass


def compare_calls(directory: str, calls: list[str], samples: int = SAMPLES, rate_per_s: float = RATE_PER_S,
                  record_bytes: int = RECORD_BYTES, work_us: float = 0.0) -> list[dict[str, Any]]:
    """`samples` appends made durable by each of `calls` (from CALLS), interleaved: at each paced
    slot the next call in turn, the order turned by one every round; each its own fresh file under
    `directory` (removed after), `work_us` of CPU between each write and its sync. One summary per
    call, as `measure`'s."""
    unknown = [c for c in calls if c not in CALLS]
    if unknown or not calls:
        raise ValueError(f"calls must be among {', '.join(CALLS)}: {', '.join(unknown) or 'none given'}")
    interval_ns = int(1e9 / rate_per_s) if rate_per_s > 0 else 0
    record = os.urandom(record_bytes)
    os.makedirs(directory, exist_ok=True)
    files: dict[str, tuple[int, str]] = {}
    prefilled: dict[str, Prefilled] = {}
    took: dict[str, list[float]] = {c: [] for c in calls}
    cpu: dict[str, list[float]] = {c: [] for c in calls}
    try:
        for call in calls:
            fd, path = tempfile.mkstemp(prefix=f"fsync-floor-{call}-", suffix=".log", dir=directory)
            os.close(fd)
            if call in PREFILLED_CALLS:
                prefilled[call] = Prefilled(path)
                files[call] = (prefilled[call].fd, path)
                continue
            files[call] = (os.open(path, os.O_WRONLY | os.O_APPEND | (os.O_DSYNC if call == "dsync" else 0)), path)
        t_next = time.perf_counter_ns()
        for i in range(samples):
            for call in calls[i % len(calls):] + calls[:i % len(calls)]:
                if interval_ns:
                    pause_ns = t_next - time.perf_counter_ns()
                    if pause_ns > 0:
                        time.sleep(pause_ns / 1e9)
                    t_next += interval_ns
                fd = files[call][0]
                t0 = time.perf_counter_ns()
                c0 = time.thread_time_ns()
                log = prefilled.get(call)
                if log is not None:
                    log.write(record, writeback=call == "writeback")
                else:
                    os.write(fd, record)
                spin_us(work_us)
                if log is not None:
                    log.sync()
                elif call == "fsync":
                    os.fsync(fd)
                elif call == "fdatasync":
                    os.fdatasync(fd)
                cpu[call].append((time.thread_time_ns() - c0) / 1000)
                took[call].append((time.perf_counter_ns() - t0) / 1000)
                if log is not None:
                    log.fill()
    finally:
        for fd, path in files.values():
            os.close(fd)
            os.unlink(path)
    return [{**summary(took[c]), "cpu_p50_us": summary(cpu[c])["p50_us"], "cpu_p90_us": summary(cpu[c])["p90_us"],
             "call": c, "record_bytes": record_bytes, "rate_per_s": rate_per_s, "work_us": work_us, "dir": directory}
            for c in calls]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("TIDINGS_BENCH_DIR", "/tmp/tidings-bench"))
    ap.add_argument("--samples", type=int, default=SAMPLES)
    ap.add_argument("--rate", type=float, default=RATE_PER_S, help="appends per second (0: back to back)")
    ap.add_argument("--record-bytes", type=int, default=RECORD_BYTES)
    ap.add_argument("--calls", help=f"compare these, interleaved (from {','.join(CALLS)})")
    ap.add_argument("--work-us", type=float, default=0.0, help="with --calls: CPU spun between write and sync")
    args = ap.parse_args()
    if args.calls:
        for line in compare_calls(args.dir, args.calls.split(","), args.samples, args.rate, args.record_bytes,
                                  args.work_us):
            print(json.dumps(line), flush=True)
        return
    print(json.dumps(measure(args.dir, args.samples, args.rate, args.record_bytes)), flush=True)


if __name__ == "__main__":
    main()
