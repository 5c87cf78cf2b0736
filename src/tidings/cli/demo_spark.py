"""The Spark side of `tidings demo`: one session for the health stream and the archive's plots.

The session starts in a worker thread while the demo sets up its clients (8 to 17 s on 2 cores),
and `start` returns once the health query has finished its first micro-batch, so the workload is
published while the query runs. The JVM's own warnings go to DATA/spark.log, not to the summary.

A micro-batch planned while a broker was up and read after it was killed fails (its pubend's
range cannot be read), and with it the query, as a Spark application's query fails. The demo then
does what the docs tell an application to do: once the broker is back, `restart` starts the query
again from its checkpoint directory and durable subscription, at most RESTARTS_MAX times; the
replayed micro-batch publishes nothing twice.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from tidings.cli.demo_io import child_stderr_to

QUERY_START_S_MAX = 180.0
POLL_S = 0.1
RESTARTS_MAX = 5


class SparkSide:
    def __init__(self, data: Path, session: Any = None) -> None:
        self.data = data
        self.session = session
        self.own_session = session is None
        self.query: Any = None
        self.started_s = 0.0  # the session and the query's first micro-batch
        self.broker = ""
        self.batches_before = 0  # micro-batches of the query's earlier runs
        self.failures: list[str] = []  # the first line of each failure that was restarted

    def start(self, broker: str) -> None:
        """Start the session (unless given one) and the health query over `broker`'s overlay."""
        t0 = time.perf_counter()
        if self.session is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the demo stays on loopback
            from pyspark.sql import SparkSession

            with child_stderr_to(self.data / "spark.log"):
                self.session = (SparkSession.builder.master("local[2]").appName("tidings-demo")
                                .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                                .config("spark.sql.shuffle.partitions", "2").getOrCreate())
            self.session.sparkContext.setLogLevel("ERROR")
            _quiet_accumulator_server(self.session)
        self.broker = broker
        self._start_query()
        self.started_s = time.perf_counter() - t0

    def _start_query(self) -> None:
        from tidings.spark.jobs import health_stream

        # Spark's active session is per JVM thread, and each Python thread has its own: without this
        # writeStream.start() in a thread other than the session's creator does not find the
        # registered Python data source (DATA_SOURCE_NOT_FOUND; reads do find it)
        self.session._jvm.SparkSession.setActiveSession(self.session._jsparkSession)
        self.query = health_stream(self.session, self.broker, str(self.data / "health-checkpoint"))
        deadline = time.monotonic() + QUERY_START_S_MAX
        while not self.query.recentProgress:
            if self.query.exception() is not None or not self.query.isActive:
                raise RuntimeError(f"the health query stopped: {_first_line(self.query.exception())}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the health query ran no micro-batch within {QUERY_START_S_MAX} s")
            time.sleep(POLL_S)

    def failed(self) -> bool:
        """The query ended with an error (and is not stopped by us)."""
        return self.query is not None and not self.query.isActive and self.query.exception() is not None

    def restart(self) -> bool:
        """Start the failed query again from its checkpoint; False once RESTARTS_MAX are spent. A
        restart that fails in its turn is left failed, for the next call."""
        if len(self.failures) >= RESTARTS_MAX:
            return False
        self.failures.append(_first_line(self.query.exception()))
        self.batches_before += len(self.query.recentProgress)
        with contextlib.suppress(RuntimeError):  # it failed again: failed() says so
            self._start_query()
        return True

    def micro_batches(self) -> int:
        return self.batches_before + (0 if self.query is None else len(self.query.recentProgress))

    def stop_query(self) -> str | None:
        """Stop the health query; its failure, if it failed."""
        if self.query is None:
            return None
        error = self.query.exception()
        self.query.stop()
        return None if error is None else _first_line(error)

    def plots(self, broker: str, deliveries: list[tuple[str, int, int]]) -> list[Path]:
        from tidings.spark.jobs import archive_plots

        self.session._jvm.SparkSession.setActiveSession(self.session._jsparkSession)  # as in _start_query

        return list(archive_plots(self.session, broker, self.data / "plots", deliveries))

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()
        if self.own_session and self.session is not None:
            self.session.stop()


def _quiet_accumulator_server(session: Any) -> None:
    """PySpark's accumulator server prints a traceback (EOFError) into the summary when a worker's
    connection ends abruptly, as when the health query is restarted after a broker died; those go
    to Spark's log instead. Any other error is printed as before."""
    server = getattr(session.sparkContext, "_accumulatorServer", None)
    if server is None:
        return
    printed = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], EOFError | ConnectionError):
            return
        printed(request, client_address)

    server.handle_error = handle_error


def _first_line(error: object) -> str:
    """The line of a StreamingQueryException that says what failed: the Python exception's own
    line (`tidings.core.errors.BrokerUnreachable: cannot connect ...`) if there is one."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    python = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return (python[-1] if python else lines[0] if lines else "unknown error")[:300]


_EXCEPTION_LINE = re.compile(r"^([a-z_]\w*\.)*[A-Z]\w*(Error|Exception|Unreachable|Closed)\b: ")
