"""One local SparkSession for every Spark test, and real brokers on loopback to read from.

Starting Spark costs 10-20 s and the first Python data source query in a session another 10-25 s,
so the session is shared by the whole run and the tests keep their queries few.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tidings.testing import BrokerProcess, wait_for

BROKER_START_S_MAX = 30.0


def _java_missing() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return None
    if shutil.which("java"):
        return None
    return "Java is not installed (PySpark needs a JVM, Java 17): Spark tests skipped"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
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
    session = (
        # local[2, 2]: a failed task runs once more, as on a cluster (plain local[2] never retries),
        # so the sink's tests can fail a task after it published and watch the retry
        SparkSession.builder.master("local[2,2]")
        .appName("tidings-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
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
