"""Every error a user can make or meet, as a Spark job would end on it: one line naming the
problem as the last thing on stderr (tidings.spark.quiet_errors: the excepthook's line, and no
stack trace from the JVM's loggers before it). Planning, options, schema, the driver, a task."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidings import sync
from tidings.testing import BrokerProcess, wait_for

pytestmark = pytest.mark.spark

QUERY_S_MAX = 120.0
UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1


@pytest.fixture(scope="module")
def quiet(spark: Any) -> Iterator[Any]:
    from tidings.spark import quiet_errors
    from tidings.spark.errors import QUIET_LOGGERS

    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    levels = {name: log4j.LogManager.getLogger(name).getLevel() for name in QUIET_LOGGERS}
    saved = sys.excepthook
    quiet_errors(spark)
    try:
        yield spark
    finally:
        sys.excepthook = saved
        for name, level in levels.items():  # the later tests' failures keep their logs
            log4j.core.config.Configurator.setLevel(name, level)


def last_words(spark: Any, spark_stderr: Any, action: Callable[[], object]) -> tuple[str, list[str]]:
    """What a job that runs `action` prints as it dies: the excepthook's output, and what Spark's
    JVM and workers wrote to stderr meanwhile (up to a marker the JVM prints after the error)."""
    mark = spark_stderr.count
    with pytest.raises(Exception) as caught:
        action()
    out = io.StringIO()
    real, sys.stderr = sys.stderr, out
    try:
        sys.excepthook(caught.type, caught.value, caught.tb)
    finally:
        sys.stderr = real
    token = f"tidings-test-mark-{mark}"
    spark.sparkContext._jvm.java.lang.System.err.println(token)
    wait_for(lambda: any(token in line for line in spark_stderr.since(mark)), timeout=30, what="the JVM's marker")
    jvm = [line for line in spark_stderr.since(mark) if token not in line]
    return out.getvalue(), jvm


def check_one_line(printed: str, jvm: list[str], problem: str) -> None:
    lines = printed.splitlines()
    assert len(lines) == 1 and problem in lines[0], printed
    assert "tidings" in lines[0]
    assert not [line for line in jvm if "Traceback" in line or line.lstrip().startswith("at ")], jvm


def batch(spark: Any, broker: str = UNREACHABLE, schema: str | None = None, **options: str) -> Any:
    reader = spark.read.format("tidings") if schema is None else spark.read.format("tidings").schema(schema)
    reader = reader.option("broker", broker).option("pattern", "load/#")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def stream(spark: Any, tmp_path: Path, broker: str = UNREACHABLE, **options: str) -> Callable[[], object]:
    def run() -> None:
        reader = spark.readStream.format("tidings").option("broker", broker).option("pattern", "load/#")
        for key, value in options.items():
            reader = reader.option(key, value)
        query = (reader.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination(QUERY_S_MAX)
        finally:
            query.stop()
    return run


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"partitions": "0"}, 'option "partitions" must be between 1 and 10000, got 0'),
        ({"endTik": "5"}, "unknown option 'endtik'"),  # Spark lower-cases the keys
        ({"startingOffsets": "latest"}, 'option "startingOffsets" of a batch read cannot be "latest"'),
        ({"endingOffsets": '{"p1": "soon"}'}, 'option "endingOffsets" maps each pubend to a tick'),
    ],
)
def test_a_bad_option(quiet: Any, spark_stderr: Any, options: dict[str, str], problem: str) -> None:
    check_one_line(*last_words(quiet, spark_stderr, lambda: batch(quiet, **options).load()), problem)


def test_a_bad_schema(quiet: Any, spark_stderr: Any) -> None:
    printed, jvm = last_words(quiet, spark_stderr, lambda: batch(quiet, schema="foo int").load().collect())
    check_one_line(printed, jvm, "a read's schema takes some of the columns")


def test_an_unreachable_broker_at_planning(quiet: Any, spark_stderr: Any) -> None:
    printed, jvm = last_words(quiet, spark_stderr, lambda: batch(quiet).load().collect())
    check_one_line(printed, jvm, f"cannot connect to broker at {UNREACHABLE}")


def test_a_task_that_fails(quiet: Any, spark_stderr: Any) -> None:
    """The sink's tasks cannot reach their broker: the tasks fail in the executors (retried once
    here, local[2,2]), Spark aborts the job, and the driver gets the task's error."""
    rows = quiet.range(4).selectExpr("'load/h1' AS channel", "CAST('x' AS BINARY) AS payload")
    printed, jvm = last_words(quiet, spark_stderr, lambda: rows.write.format("tidings").option(
        "broker", UNREACHABLE).mode("append").save())
    check_one_line(printed, jvm, f"cannot connect to broker at {UNREACHABLE}")


def test_a_missing_or_wrong_durable_name(quiet: Any, spark_stderr: Any, tmp_path: Path,
                                         start_broker: Callable[..., BrokerProcess]) -> None:
    printed, jvm = last_words(quiet, spark_stderr, stream(quiet, tmp_path / "a"))
    check_one_line(printed, jvm, 'option "durableName" is required for a streaming read')
    printed, jvm = last_words(quiet, spark_stderr, stream(quiet, tmp_path / "b", durableName="x" * 300))
    check_one_line(printed, jvm, 'option "durableName" is required for a streaming read: 1 to 256 bytes')
    broker = start_broker()
    with sync.connect(broker.address, service="spark") as client:  # the name, taken with another pattern
        client.subscribe("other/#", durable="taken").close()
    printed, jvm = last_words(quiet, spark_stderr, stream(quiet, tmp_path / "c", broker.address, durableName="taken"))
    check_one_line(printed, jvm, "durable subscription 'taken' exists with pattern 'other/#'")


def test_a_corrupt_token(quiet: Any, spark_stderr: Any, tmp_path: Path) -> None:
    printed, jvm = last_words(quiet, spark_stderr, stream(quiet, tmp_path, durableName="q", startingOffsets="tk1.AAAA"))
    check_one_line(printed, jvm, 'option "startingOffsets" is not a valid checkpoint token')
    printed, jvm = last_words(quiet, spark_stderr, lambda: batch(quiet, startingOffsets="tk1.AAAA").load())
    check_one_line(printed, jvm, 'option "startingOffsets" is not a valid checkpoint token')


def test_a_forbidden_read(quiet: Any, spark_stderr: Any, tmp_path: Path) -> None:
    from tidings.aio.auth_file import add_identity
    from tidings.core.auth.credentials import KdfParams

    auth, kdf = tmp_path / "auth.toml", KdfParams(n=1 << 10)
    writer = str(add_identity(auth, "loadmon", [], ["load/#"], [], kdf))
    reader = str(add_identity(auth, "reader", [], [], ["load/h1"], kdf))
    with BrokerProcess(tmp_path / "b", args=["--auth", str(auth)], credential=reader) as broker:
        with sync.connect(broker.address, credential=writer) as client:  # a read of nothing asks nothing
            client.publish_many([("load/h1", b"1"), ("load/h2", b"2")])
        printed, jvm = last_words(quiet, spark_stderr, lambda: batch(quiet, broker.address, credential=reader)
                                  .load().collect())
    check_one_line(printed, jvm, "may not subscribe")
