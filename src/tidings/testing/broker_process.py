"""A real broker in a child process, for integration tests: start, kill -9, restart, stop.

The broker listens on 127.0.0.1 (port 0 picks a free one the first time; a restart reuses the
port) and prints a JSON ready line, which `start` waits for with a deadline instead of sleeping.
`spawn` and `wait_ready` are the two halves of `start`, so several brokers can start at once.
With `join` the broker joins the overlay of the broker at that address; with `http` it serves
/metrics and /status on a free port of 127.0.0.1 (`http_address`); `args` adds options (such
as `--auth FILE`), and `credential` and `tls` are what `status` connects with. With `log` the
broker's log (its stderr) is appended to that file instead of the test's stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tidings import sync

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.01,
             what: str = "condition") -> T:
    """Poll `condition` until it returns a truthy value or `timeout` seconds pass (TimeoutError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout} s")
        time.sleep(interval)


class BrokerProcess:
    def __init__(self, data: Path, config: dict[str, int] | None = None, port: int = 0,
                 start_timeout: float = 30.0, join: str | None = None, http: bool = False,
                 args: list[str] | None = None, credential: str | None = None,
                 tls: ssl.SSLContext | None = None, log: Path | None = None) -> None:
        self.data = Path(data)
        self.log = log  # where the broker's log (its stderr) goes; None: this process's stderr
        self.args = args or []  # more `tidings broker` options, e.g. ["--auth", FILE]
        self.credential = credential  # what `status` authenticates with
        self.tls = tls  # and the TLS it connects with
        self.port = port
        self.config = config
        self.start_timeout = start_timeout
        self.join = join
        self.http = http
        self.http_address: str | None = None
        self.mqtt_address: str | None = None  # the ready line's `mqtt` (with `--mqtt HOST:PORT` in args)
        self.mqtt_tls_address: str | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.pubend: str | None = None
        self.node_id: str | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BrokerProcess:
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        cmd = [sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(self.data),
               "--listen", f"127.0.0.1:{self.port}", "--log-level", "warning"]
        if self.join is not None:
            cmd += ["--join", self.join]
        if self.http:
            cmd += ["--http", "127.0.0.1:0"]
        cmd += self.args
        if self.config:
            self.data.mkdir(parents=True, exist_ok=True)
            path = self.data.parent / f"{self.data.name}.toml"
            path.write_text("".join(f"{k} = {str(v).lower() if type(v) is bool else v}\n"
                                    for k, v in self.config.items()))
            cmd += ["--config", str(path)]
        with contextlib.ExitStack() as stack:
            log = None if self.log is None else stack.enter_context(self.log.open("a"))
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait_ready(self) -> BrokerProcess:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], self.start_timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.kill()
            raise RuntimeError(f"broker did not become ready within {self.start_timeout} s "
                               f"(exit code {self.proc.returncode})")
        info: dict[str, Any] = json.loads(line)
        self.port = int(info["listening"].rsplit(":", 1)[1])
        self.pubend = info["pubend"]
        self.node_id = info.get("node_id")
        self.http_address = info.get("http")
        self.mqtt_address = info.get("mqtt")
        self.mqtt_tls_address = info.get("mqtt_tls")
        return self

    def status(self, timeout: float = 10.0) -> dict[str, Any]:
        """The broker's status, as `tidings status --json` prints it."""
        with sync.connect(self.address, service="tidings-testing", timeout=timeout,
                          credential=self.credential, tls=self.tls or False, follow_advice=False) as client:
            status: dict[str, Any] = client.status()
        return status

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_bytes(self) -> int:
        """The broker process's peak resident memory (VmHWM), in bytes."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        """The CPU time the broker process has used, all its threads, user and system (utime +
        stime in /proc/PID/stat): a cost measure the machine's other load does not inflate."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14 and 15 of stat(5)

    def kill(self) -> None:
        """kill -9: no cleanup, no final fsync."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return int(self.proc.returncode)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
