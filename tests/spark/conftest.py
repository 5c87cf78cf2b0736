"""One local SparkSession for every Spark test, and real brokers on loopback to read from.

Starting Spark costs 10-20 s and the first Python data source query in a session another 10-25 s,
so the session is shared by the whole run and the tests keep their queries few.
"""

from __future__ import annotations

import collections
import os
import shutil
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidings.testing import BrokerProcess, wait_for

BROKER_START_S_MAX = 30.0
STDERR_LINES_MAX = 20_000


class SparkStderr:
    """What Spark's JVM and its Python workers write to stderr, also passed through to ours: the
    JVM is started with a pipe as its stderr, read by a thread into a bounded list of lines."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_LINES_MAX)
        self.count = 0  # lines ever read
        self._read_fd, self._write_fd = os.pipe()
        self._out = os.dup(2)

    def start_child_with_it(self, start: Callable[[], object]) -> object:
        """Run `start` (which spawns the JVM) with fd 2 pointing into the pipe."""
        os.dup2(self._write_fd, 2)
        try:
            return start()
        finally:
            os.dup2(self._out, 2)
            os.close(self._write_fd)
            threading.Thread(target=self._pump, name="spark-stderr", daemon=True).start()

    def _pump(self) -> None:
        with os.fdopen(self._read_fd, "rb") as pipe:
            for raw in pipe:
                os.write(self._out, raw)
                self.lines.append(raw.decode(errors="replace"))
                self.count += 1

    def since(self, mark: int) -> list[str]:
        """The lines read after `mark` (an earlier `count`) that are still held."""
        return list(self.lines)[-(self.count - mark):] if self.count > mark else []


def _java_missing() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return None
    if shutil.which("java"):
        return None
    return "Java is not installed (PySpark needs a JVM, Java 17): Spark tests skipped"


@pytest.fixture(scope="session")
def spark_stderr() -> SparkStderr:
    return SparkStderr()


@pytest.fixture(scope="session")
def spark(spark_stderr: SparkStderr) -> Iterator[object]:
    reason = _java_missing()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install -e '.[spark]')")
    from pyspark.sql import SparkSession

    from tidings.spark import register

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP")}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # tests bind loopback only
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must import this checkout's tidings
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (
        # local[2, 2]: a failed task runs once more, as on a cluster (plain local[2] never retries),
        # so the sink's tests can fail a task after it published and watch the retry
        SparkSession.builder.master("local[2,2]")
        .appName("tidings-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    session: Any = spark_stderr.start_child_with_it(builder.getOrCreate)
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def start_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., BrokerProcess]]:
    """Start real `tidings broker` child processes, each with its own data directory on a free
    loopback port, waiting (with a deadline) until it accepts connections. All are stopped at the
    end of the module: SIGTERM, then SIGKILL after a deadline."""
    started: list[BrokerProcess] = []

    def start(config: dict[str, int] | None = None, join: str | None = None) -> BrokerProcess:
        data = tmp_path_factory.mktemp("broker") / "data"
        broker = BrokerProcess(data, config=config, start_timeout=BROKER_START_S_MAX, join=join)
        started.append(broker)
        broker.start()
        wait_for(lambda: _accepts_connections(broker.port), timeout=BROKER_START_S_MAX,
                 what=f"broker on port {broker.port} accepting connections")
        return broker

    try:
        yield start
    finally:
        for broker in reversed(started):
            broker.stop()
