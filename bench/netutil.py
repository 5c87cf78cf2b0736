"""Small shared pieces of the benchmark: loopback sockets and /proc readings.

Every socket the benchmark opens goes to 127.0.0.1; there is no way to point it elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable

LOOPBACK = "127.0.0.1"
SOCKET_BUFFER_BYTES = 1 << 20
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def connect_loopback(port: int, timeout_s: float = 10.0) -> socket.socket:
    sock = socket.create_connection((LOOPBACK, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def free_port() -> int:
    """A port nobody listens on right now (the kernel's choice), for a broker we start."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        try:
            socket.create_connection((LOOPBACK, port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


# ---- /proc ---------------------------------------------------------------------------------------


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (a broker may run helper processes)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def cpu_ticks(pids: list[int]) -> int:
    """utime + stime of these processes, in clock ticks."""
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError):
            continue
    return total


def memory_kb(pids: list[int]) -> tuple[int, int]:
    """(VmRSS, VmHWM) summed over these processes, in KiB."""
    rss = hwm = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
                    elif line.startswith("VmHWM:"):
                        hwm += int(line.split()[1])
        except OSError:
            continue
    return rss, hwm


def cpu_times() -> dict[str, list[int]]:
    """Per-CPU jiffies from /proc/stat: user nice system idle iowait irq softirq steal."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                fields = line.split()
                out[fields[0]] = [int(x) for x in fields[1:9]]
    return out


def cpu_usage(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Busy and steal percent per CPU between two cpu_times() readings."""
    out = {}
    for cpu, now in after.items():
        delta = [b - a for a, b in zip(before.get(cpu, [0] * 8), now, strict=True)]
        total = sum(delta) or 1
        busy = delta[0] + delta[1] + delta[2] + delta[5] + delta[6]
        out[cpu] = {"busy_pct": round(100 * busy / total, 1), "steal_pct": round(100 * delta[7] / total, 1)}
    return out


def busy_jiffies() -> int:
    """Busy time of all CPUs together (user nice system irq softirq), in clock ticks."""
    return sum(v[0] + v[1] + v[2] + v[5] + v[6] for v in cpu_times().values())


class ServerSampler(threading.Thread):
    """Samples a broker's CPU time and resident memory, and the whole machine's busy time, every
    `period_s` while a test runs. The machine's busy time minus the broker's and the load's is the
    foreign load that shared the CPUs with the test (this runs on shared VMs)."""

    def __init__(self, pid: int, period_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.period_s = period_s
        self.samples: list[tuple[float, int, int]] = []  # (monotonic s, broker ticks, machine ticks)
        self.rss_kb_max = 0
        self.hwm_kb = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.period_s)

    def sample(self) -> None:
        pids = process_tree(self.pid)
        self.samples.append((time.monotonic(), cpu_ticks(pids), busy_jiffies()))
        rss, hwm = memory_kb(pids)
        self.rss_kb_max = max(self.rss_kb_max, rss)
        self.hwm_kb = max(self.hwm_kb, hwm)

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:
            self.join(timeout=2)
        self.sample()

    def _pct(self, column: int, t_from: float, t_to: float | None) -> float | None:
        if t_to is None or t_to <= t_from or len(self.samples) < 2:
            return None
        a = min(self.samples, key=lambda s: abs(s[0] - t_from))
        b = min(self.samples, key=lambda s: abs(s[0] - t_to))
        if b[0] <= a[0]:
            return None
        return round(100 * (b[column] - a[column]) / CLOCK_TICKS_PER_S / (b[0] - a[0]), 1)

    def cpu_pct(self, t_from: float, t_to: float | None) -> float | None:
        """Broker CPU between two monotonic instants (100 = one CPU), from the nearest samples."""
        return self._pct(1, t_from, t_to)

    def machine_pct(self, t_from: float, t_to: float | None) -> float | None:
        """Busy time of all CPUs together over the same span (200 = both CPUs of a 2-CPU box)."""
        return self._pct(2, t_from, t_to)
