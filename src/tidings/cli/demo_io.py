"""Processes beside `tidings demo`'s own: the JVM's stderr kept out of the summary, and the tuple
store run as its own process (`tidings tuple-store`), killed with kill -9 and started again."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

STORE_READY_S_MAX = 30.0
STORE_STOP_S_MAX = 10.0


@contextlib.contextmanager
def child_stderr_to(path: Path) -> Iterator[None]:
    """Processes started inside the block (the JVM pyspark launches) write their stderr to `path`
    for their whole life; this process's stderr is back in place after the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


class StoreProcess:
    """`tidings tuple-store --broker BROKER --db DB`, its stderr appended to `log`."""

    def __init__(self, broker: str, db: Path, log: Path) -> None:
        self.broker, self.db, self.log = broker, db, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        """Start it and return once it says it is ready (its subscriptions are in place)."""
        with open(self.log, "ab") as err:
            proc = subprocess.Popen([sys.executable, "-m", "tidings.cli.main", "tuple-store", "--broker",
                                     self.broker, "--db", str(self.db)], stdout=subprocess.PIPE, stderr=err)
        self.proc = proc
        self.starts += 1
        assert proc.stdout is not None
        deadline = time.monotonic() + STORE_READY_S_MAX
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(deadline - time.monotonic()):
                    line = proc.stdout.readline()
                    if b"ready" in line:
                        return
                    if not line:
                        break
        self.kill()
        raise RuntimeError(f"the tuple store did not start (exit {proc.returncode}); see {self.log}")

    def kill(self) -> None:
        """kill -9."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STORE_STOP_S_MAX)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STORE_STOP_S_MAX)
            except subprocess.TimeoutExpired:
                self.kill()
