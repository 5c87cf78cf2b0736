"""The one line a Spark job prints when it dies of a tidings error (tidings/spark/errors.py),
without Spark: the texts below are what PySpark 4.3 puts in its exceptions."""

from __future__ import annotations

import io
import sys

import pytest

from tidings.core.errors import BrokerUnreachable
from tidings.spark.errors import one_line_hook, tidings_line
from tidings.spark.planning import ReadError

WORKER_TRACEBACK = """[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source initialize source: \
Traceback (most recent call last):
  File "/x/pyspark/sql/streaming/python_streaming_source_runner.py", line 258, in main
  File "/x/tidings/spark/options.py", line 99, in parse_stream_options
    raise ValueError(
ValueError: tidings: option "durableName" is required for a streaming read

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/pyspark/sql/streaming/python_streaming_source_runner.py", line 295, in main
UnboundLocalError: cannot access local variable 'reader' where it is not associated with a value
 SQLSTATE: 38000"""

UNREACHABLE = """[PYTHON_DATA_SOURCE_ERROR] Failed to generate Python data source read partitions: \
Traceback (most recent call last):
  File "/x/tidings/spark/overlay.py", line 112, in discover
    with connect_to(opts, address, "planner") as client:
tidings.core.errors.BrokerUnreachable: cannot connect to broker at 127.0.0.1:1: [Errno 111] Connection refused
 SQLSTATE: 38000"""


class CapturedException(Exception):  # as pyspark.errors.exceptions.captured's: the text is the JVM's
    pass


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (CapturedException(WORKER_TRACEBACK),
         'ValueError: tidings: option "durableName" is required for a streaming read'),
        (CapturedException(UNREACHABLE), "tidings.core.errors.BrokerUnreachable: cannot connect to broker at "
                                         "127.0.0.1:1: [Errno 111] Connection refused"),
        (ValueError('tidings: option "partitions" must be between 1 and 10000, got 0'),
         'ValueError: tidings: option "partitions" must be between 1 and 10000, got 0'),
        (ReadError("the broker at b:1 now logs pubend p2, not p1"),
         "tidings.spark.planning.ReadError: the broker at b:1 now logs pubend p2, not p1"),
        (BrokerUnreachable("cannot connect to broker at h:1"),
         "tidings.core.errors.BrokerUnreachable: cannot connect to broker at h:1"),
    ],
)
def test_the_tidings_line_is_found_in_spark_s_wrapping(exc: BaseException, line: str) -> None:
    assert tidings_line(exc) == line


def test_a_cause_is_searched_and_other_errors_are_not_tidings() -> None:
    try:
        try:
            raise CapturedException(UNREACHABLE)
        except CapturedException as inner:
            raise RuntimeError("py4j wrapper") from inner
    except RuntimeError as outer:
        assert tidings_line(outer) is not None and "BrokerUnreachable" in (tidings_line(outer) or "")
    assert tidings_line(ValueError("some other: thing")) is None
    assert tidings_line(CapturedException("Traceback\nKeyError: 'x'\nValueError: bad")) is None


def test_the_hook_prints_one_line_for_tidings_and_defers_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[BaseException] = []
    hook = one_line_hook(lambda kind, exc, tb: calls.append(exc))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    hook(CapturedException, CapturedException(WORKER_TRACEBACK), None)
    other = KeyError("x")
    hook(KeyError, other, None)
    assert err.getvalue() == 'ValueError: tidings: option "durableName" is required for a streaming read\n'
    assert calls == [other]


def test_the_quiet_log4j2_file_turns_off_every_quiet_logger() -> None:
    from tidings.spark.errors import QUIET_LOG4J2, QUIET_LOGGERS, quiet_java_options

    settings = dict(line.split(" = ", 1) for line in QUIET_LOG4J2.read_text().splitlines()
                    if line and not line.startswith("#"))
    off = {settings[key.replace(".level", ".name")] for key, value in settings.items()
           if key.startswith("logger.") and key.endswith(".level") and value == "off"}
    assert off == set(QUIET_LOGGERS) and settings["rootLogger.level"] == "error"
    assert quiet_java_options() == f"-Dlog4j2.configurationFile={QUIET_LOG4J2}"
