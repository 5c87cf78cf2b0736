"""Stalls in test (d): which samples were slow, and who was not running meanwhile.

A latency run at 1,000 events/s sometimes holds a pause of 8-400 ms (docs/benchmarks.md, stop 22
in "Comparing two commits") that sets its p99 alone. `StallWatch` lives in the load process of
(d). After every read of deliveries it takes a cheap snapshot (pread of files kept open):

- the broker's threads' and the load process's `/proc/PID/task/TID/schedstat`: time on a CPU and
  time runnable but waiting for one (run-queue wait), in ns;
- `/proc/stat`: the machine's steal time per CPU (the hypervisor ran something else) and iowait;
- `/proc/diskstats` for the device under the broker's data: writes and flushes completed and the
  milliseconds spent on them (a slow fsync shows there);

and it notes how late the load's own sends were (a load process that did not run sends late).
A read whose slowest event took longer than `threshold_us` is a stall; consecutive slow reads are
one episode, whose evidence is the difference between the snapshot before its first read and the
one after its last. `verdict` names what the evidence points at (`classify`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

THRESHOLD_US = 5000.0  # a sample over this is a stall (p99 at 1,000/s is about 1 ms)
EPISODES_MAX = 20  # episodes kept in full per run; the rest only counted
USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Evidence counts when it explains at least this share of the episode's slowest sample.
SHARE_MIN = 0.5


@dataclass
class Snapshot:
    t_ns: int
    broker: dict[str, tuple[int, int]]  # thread name -> (run ns, run-queue wait ns), summed per name
    load: tuple[int, int]
    steal_ns: int  # all CPUs together
    iowait_ns: int
    disk: tuple[int, int, int, int]  # writes completed, ms writing, flushes completed, ms flushing


def _pread(fd: int) -> bytes:
    return os.pread(fd, 4096, 0)


class StallWatch:
    """Snapshots around each read of the latency run; see the module docstring."""

    def __init__(self, broker_pid: int, data_dir: str | None = None, threshold_us: float = THRESHOLD_US) -> None:
        self.threshold_us = threshold_us
        self.broker_fds: list[tuple[str, int]] = []
        if broker_pid:
            for tid in sorted(os.listdir(f"/proc/{broker_pid}/task"), key=int):
                try:
                    with open(f"/proc/{broker_pid}/task/{tid}/comm") as f:
                        name = f.read().strip()
                    self.broker_fds.append((name, os.open(f"/proc/{broker_pid}/task/{tid}/schedstat", os.O_RDONLY)))
                except OSError:
                    continue  # a thread that ended meanwhile
        self.load_fd = os.open(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat", os.O_RDONLY)
        self.stat_fd = os.open("/proc/stat", os.O_RDONLY)
        self.disk_fd = os.open("/proc/diskstats", os.O_RDONLY)
        self.disk_name = _disk_of(data_dir or "/")
        self.prev: Snapshot | None = None
        self.late_ns = 0  # the latest send's lateness since the last snapshot (max)
        self.slow: list[dict[str, Any]] = []  # one per slow read, merged into episodes at the end
        self.open: dict[str, Any] | None = None  # the episode in progress
        self.episodes: list[dict[str, Any]] = []
        self.samples_over = 0
        self._dropped = 0  # episodes past EPISODES_MAX

    def close(self) -> None:
        for _, fd in self.broker_fds:
            os.close(fd)
        for fd in (self.load_fd, self.stat_fd, self.disk_fd):
            os.close(fd)

    def sent_late(self, late_ns: int) -> None:
        """A send left `late_ns` after it was due (the load process was not running, or was busy)."""
        self.late_ns = max(self.late_ns, late_ns)

    def snapshot(self, t_ns: int) -> Snapshot:
        broker: dict[str, tuple[int, int]] = {}
        for name, fd in self.broker_fds:
            try:
                run, wait = _pread(fd).split()[:2]
            except (OSError, ValueError):
                continue  # the thread ended
            r, w = broker.get(name, (0, 0))
            broker[name] = (r + int(run), w + int(wait))
        run, wait = _pread(self.load_fd).split()[:2]
        steal = iowait = 0
        for line in _pread(self.stat_fd).split(b"\n"):
            if line.startswith(b"cpu") and line[3:4].isdigit():
                cols = line.split()
                iowait += int(cols[5])
                steal += int(cols[8])
        disk = (0, 0, 0, 0)
        for line in _pread(self.disk_fd).split(b"\n"):
            cols = line.split()
            if len(cols) > 3 and cols[2].decode() == self.disk_name:
                flushes = (int(cols[18]), int(cols[19])) if len(cols) > 19 else (0, 0)
                disk = (int(cols[7]), int(cols[10]), *flushes)
                break
        tick_ns = 1_000_000_000 // USER_HZ
        return Snapshot(t_ns, broker, (int(run), int(wait)), steal * tick_ns, iowait * tick_ns, disk)

    def read_done(self, t_ns: int, worst_us: float, events: int, nbytes: int, t_run_ns: int) -> None:
        """After a read of deliveries at t_ns: its slowest event's latency, how many events and
        bytes it held; t_run_ns is t_ns less the run's start (the stall's timestamp)."""
        now = self.snapshot(t_ns)
        before = self.prev
        self.prev = now
        if worst_us <= self.threshold_us or before is None:
            if self.open is not None:
                self._close_episode()
            self.late_ns = 0
            return
        self.samples_over += events
        if self.open is None:
            self.open = {"t_ms": round(t_run_ns / 1e6 - worst_us / 1e3, 1), "max_us": 0.0, "events": 0,
                         "bytes": 0, "reads": 0, "before": before, "late_ns": 0}
        ep = self.open
        ep["max_us"] = max(ep["max_us"], round(worst_us, 1))
        ep["events"] += events
        ep["bytes"] += nbytes
        ep["reads"] += 1
        ep["after"] = now
        ep["late_ns"] = max(ep["late_ns"], self.late_ns)
        self.late_ns = 0

    def finish(self) -> dict[str, Any]:
        if self.open is not None:
            self._close_episode()
        return {"threshold_us": self.threshold_us, "samples_over": self.samples_over,
                "episodes_count": len(self.episodes) + self._dropped, "episodes": self.episodes,
                "verdicts": _count(ep["verdict"] for ep in self.episodes)}

    def _close_episode(self) -> None:
        ep = self.open
        assert ep is not None
        self.open = None
        if len(self.episodes) >= EPISODES_MAX:
            self._dropped += 1
            return
        evidence = deltas(ep.pop("before"), ep.pop("after"))
        evidence["send_late_ms"] = round(ep.pop("late_ns") / 1e6, 2)
        ep.update(evidence)
        ep["verdict"] = classify(ep["max_us"] / 1e3, evidence)
        self.episodes.append(ep)


def deltas(a: Snapshot, b: Snapshot) -> dict[str, Any]:
    """What happened between two snapshots, in milliseconds."""
    threads = {}
    for name, (run, wait) in b.broker.items():
        r0, w0 = a.broker.get(name, (run, wait))
        threads[name] = [round((run - r0) / 1e6, 2), round((wait - w0) / 1e6, 2)]
    return {
        "window_ms": round((b.t_ns - a.t_ns) / 1e6, 2),
        "broker_run_ms": round(sum(v[0] for v in threads.values()), 2),
        "broker_wait_ms": round(max((v[1] for v in threads.values()), default=0.0), 2),
        "broker_threads": threads,  # name -> [run ms, run-queue wait ms]
        "load_run_ms": round((b.load[0] - a.load[0]) / 1e6, 2),
        "load_wait_ms": round((b.load[1] - a.load[1]) / 1e6, 2),
        "steal_ms": round((b.steal_ns - a.steal_ns) / 1e6, 1),
        "iowait_ms": round((b.iowait_ns - a.iowait_ns) / 1e6, 1),
        "disk_writes": b.disk[0] - a.disk[0], "disk_write_ms": b.disk[1] - a.disk[1],
        "disk_flushes": b.disk[2] - a.disk[2], "disk_flush_ms": b.disk[3] - a.disk[3],
    }


def classify(stall_ms: float, ev: dict[str, Any]) -> str:
    """What the evidence of one episode points at, the largest explanation first: a process that
    was runnable but not run (run-queue wait), a process that ran the whole time (busy), the
    hypervisor (steal), the disk (slow writes or flushes), the load sending late; else nothing
    seen from inside the VM (a pause of the whole VM shows as time that nobody ran or waited)."""
    floor = SHARE_MIN * stall_ms
    found = []
    if ev.get("load_wait_ms", 0) >= floor:
        found.append((ev["load_wait_ms"], "load process waited for a CPU"))
    if ev.get("broker_wait_ms", 0) >= floor:
        found.append((ev["broker_wait_ms"], "broker waited for a CPU"))
    if ev.get("broker_run_ms", 0) >= floor:
        found.append((ev["broker_run_ms"], "broker busy"))
    if ev.get("steal_ms", 0) >= floor:
        found.append((ev["steal_ms"], "CPU stolen by the hypervisor"))
    disk_ms = max(ev.get("disk_write_ms", 0), ev.get("disk_flush_ms", 0))
    if disk_ms >= floor:
        found.append((float(disk_ms), "disk slow (writes/flushes)"))
    if ev.get("send_late_ms", 0) >= floor:
        found.append((ev["send_late_ms"], "load process sent late"))
    if not found:
        return "neither process ran nor waited, disk quick: outside both (VM paused?)"
    found.sort(key=lambda f: -f[0])
    return "; ".join(f"{what} ({ms:.1f} ms)" for ms, what in found)


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of every thread of `pid` so far: each hand-off
    between the broker's event loop and its log writer costs the wake-ups of one or both."""
    vol = invol = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        invol += int(line.split()[1])
        except OSError:
            continue  # a thread that ended
    return vol, invol


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        key = item.split(" (")[0]
        out[key] = out.get(key, 0) + 1
    return out


def _disk_of(path: str) -> str:
    """The block device (as /proc/diskstats names it) under `path`, or "" when not found."""
    try:
        dev = os.stat(path).st_dev
        with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/uevent") as f:
            for line in f:
                if line.startswith("DEVNAME="):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""
