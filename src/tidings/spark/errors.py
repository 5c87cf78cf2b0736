"""One line per error: the tidings line out of Spark's wrapping, for a job's last words.

Spark wraps an error raised in the data source (on the driver or in a task) in its own
exceptions: an AnalysisException, a StreamingQueryException, a SparkException, each carrying the
Python worker's traceback as text, with the JVM's log lines and a driver traceback around it. A
job that ends on such an error prints 40 to 300 lines on stderr, at log level ERROR too, and the
one line saying what is wrong (`ValueError: tidings: option "partitions" must be ...`,
`tidings.core.errors.BrokerUnreachable: cannot connect to broker at ...`) sits somewhere inside.

`tidings_line(exc)` finds that line: the last line of the exception's text (and of its causes')
that is a tidings exception (`tidings.<module>.<Class>: ...`) or an exception whose message
begins with "tidings". `quiet_errors(spark)` makes it what a job prints when it dies of such an
error (sys.excepthook), and turns off the JVM loggers that print a failed task's or a failed
query's whole stack trace before the driver gets the same error as an exception
(QUIET_LOGGERS). Errors that are not tidings' go to the usual hook, in full.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

# `Name: message` lines: a tidings exception class, or any exception whose message is tidings'
_LINE = re.compile(r"^\s*(?:tidings(?:\.\w+)+|(?:\w+\.)*\w*(?:Error|Exception|Warning)): .*$")
_TIDINGS = re.compile(r"^\s*(?:tidings(?:\.\w+)+: |(?:\w+\.)*\w+: tidings\b)")
CHAIN_MAX = 16  # exceptions followed through __cause__ / __context__

# JVM loggers that log a failed task's or a failed query's stack trace, which then reaches the
# driver as an exception: the excepthook prints its one line instead
QUIET_LOGGERS = (
    "org.apache.spark.executor.Executor",  # ERROR Executor: Exception in task 0.0 ... (+ trace)
    "org.apache.spark.scheduler.TaskSetManager",  # WARN Lost task ...; ERROR Task 0 ... aborting job
    "org.apache.spark.scheduler.TaskSchedulerImpl",
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",  # ERROR ... terminated with error
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",  # its name before Spark 4.1
    "org.apache.spark.sql.execution.datasources.v2",  # ERROR ... Data source write ... aborting / aborted
    "org.apache.spark.sql.execution.python.PythonStreamingSourceRunner",
    "org.apache.spark.api.python.PythonRunner",
    "org.apache.spark.util.Utils",  # ERROR Utils: Aborting task (+ the worker's traceback)
)

# a log4j2 configuration for the driver's JVM: Spark's own at level error, QUIET_LOGGERS off, and
# none of the default profile's start-up lines ("Using Spark's default log4j profile", ...)
QUIET_LOG4J2 = Path(__file__).with_name("log4j2-quiet.properties")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < CHAIN_MAX and all(current is not s for s in seen):
        seen.append(current)
        yield current
        current = current.__cause__ or current.__context__


def tidings_line(exc: BaseException) -> str | None:
    """The one line naming a tidings error in `exc` (raised by tidings, or wrapped by Spark with
    the worker's traceback as text); None when it is not tidings'."""
    for item in _chain(exc):
        name = f"{type(item).__module__}.{type(item).__qualname__}"
        text = str(item)
        first = text.splitlines()[0] if text else ""
        if name.startswith("tidings."):
            return f"{name}: {first}"
        if text.startswith("tidings"):
            return f"{type(item).__qualname__}: {first}"
        lines = [line.strip() for line in text.splitlines() if _LINE.match(line) and _TIDINGS.match(line)]
        if lines:
            return lines[-1]
    return None


ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]


def one_line_hook(previous: ExceptHook) -> ExceptHook:
    """An excepthook printing a tidings error as its one line, and any other as `previous` does."""

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        line = tidings_line(exc) if isinstance(exc, Exception) else None
        if line is None:
            previous(kind, exc, tb)
            return
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    hook.tidings_one_line = True  # type: ignore[attr-defined]
    return hook


def quiet_java_options() -> str:
    """`spark.driver.extraJavaOptions` that start the driver's JVM with QUIET_LOG4J2 (set it on the
    builder before the session starts: `builder.config("spark.driver.extraJavaOptions",
    quiet_java_options())`)."""
    return f"-Dlog4j2.configurationFile={QUIET_LOG4J2}"


def quiet_errors(spark: Any = None) -> None:
    """Make a job that dies of a tidings error print one line (sys.excepthook), and, given the
    session, turn off the JVM loggers in QUIET_LOGGERS (the driver gets their errors anyway).
    Call it once, after the session is built; calling it again changes nothing."""
    if not getattr(sys.excepthook, "tidings_one_line", False):
        sys.excepthook = one_line_hook(sys.excepthook)
    if spark is None:
        return
    jvm = spark.sparkContext._jvm
    off = jvm.org.apache.logging.log4j.Level.OFF
    for name in QUIET_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
