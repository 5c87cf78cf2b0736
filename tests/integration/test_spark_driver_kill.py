"""A streaming Spark job killed with kill -9 and restarted from its checkpoint, again and again,
while events are published and the sink's broker is killed and restarted: every event is in the
sink's output exactly once.

The job (spark_stream_job.py) is its own Python process with its own Spark: tidings source (a
two-broker overlay) -> exactly-once tidings sink (the second broker), 0.5 s trigger. The test kills
its whole process group (the Python driver, its JVM and Python workers: the driver's machine
gone) each time the sink's output has grown since the job started, so every kill lands in a
running query, perhaps in the middle of a micro-batch's publishes. In the second run the sink's
broker, which also logs half of the input, is killed with kill -9 and restarted on its data
directory. The last run drains what is left. The check reads every input event from the brokers'
logs and every output event from the sink's log and compares them one for one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from tidings import sync
from tidings.core.errors import TidingsError
from tidings.testing import BrokerProcess, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.integration]

JOB = Path(__file__).with_name("spark_stream_job.py")
DRIVER_KILLS = 2  # in make test: each job start is a JVM's (10-15 s on CI); make soak kills it 6 times
SOAK_DRIVER_KILLS = 6
PROGRESS_S_MAX = 60.0  # a job's JVM start, its first micro-batch and one more, on a loaded machine
DRAIN_S_MAX = 45.0
EVENTS_PER_ROUND = 10
ROUND_S = 0.1  # the publishers' pace: about 100 events/s per broker
ROUNDS_MAX = 2000  # a bound on each publisher, stopped much sooner


class Publisher(threading.Thread):
    """Publishes rounds of events on `in/<name>` to one broker at a steady pace, reconnecting
    after failures (its broker killed), and counts what was acknowledged."""

    def __init__(self, broker: BrokerProcess, name: str) -> None:
        super().__init__(name=f"publisher-{name}", daemon=True)
        self.broker, self.name = broker, name
        self.acked: list[bytes] = []
        self.halt = threading.Event()

    def run(self) -> None:
        sent = 0
        for _ in range(ROUNDS_MAX):
            if self.halt.wait(ROUND_S):
                return
            try:
                with sync.connect(self.broker.address, service="test", instance=self.name, timeout=2.0,
                                  follow_advice=False) as client:
                    while not self.halt.wait(ROUND_S):
                        batch = [(f"in/{self.name}", f"{self.name}{sent + i}".encode(), {"i": sent + i})
                                 for i in range(EVENTS_PER_ROUND)]
                        sent += EVENTS_PER_ROUND  # names are never reused, acknowledged or not
                        client.publish_many(batch)
                        self.acked += [payload for _c, payload, _a in batch]
            except (TidingsError, OSError, TimeoutError):
                continue

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        assert not self.is_alive()


def log_payloads(broker: BrokerProcess, pattern: str) -> Counter[bytes]:
    """Each payload on `pattern` in the broker's own log, counted."""
    with sync.connect(broker.address, service="test", instance="check", follow_advice=False) as client:
        return Counter(event.payload for event in client.read(pattern, after=0))


class Job:
    """The streaming job as a child process in its own process group, its output in a file."""

    def __init__(self, tmp: Path, source: str, sink: str) -> None:
        self.log = tmp / "job.log"
        self.checkpoint = tmp / "checkpoint"
        self.args = [sys.executable, str(JOB), source, sink, str(self.checkpoint)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            out.write(f"---- run {self.runs}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
        self.runs += 1

    def kill(self) -> None:
        """kill -9 of the driver and everything it started."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):  # its group: the job's session
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:]) if self.log.exists() else ""


def test_a_streaming_job_killed_with_kill_9_again_and_again_writes_each_event_once(tmp_path: Path) -> None:
    killed_again_and_again(tmp_path, DRIVER_KILLS)


@pytest.mark.soak
def test_a_streaming_job_killed_with_kill_9_many_times_writes_each_event_once(tmp_path: Path) -> None:
    killed_again_and_again(tmp_path, SOAK_DRIVER_KILLS)


def killed_again_and_again(tmp_path: Path, kills: int) -> None:
    """`kills` runs of the job killed once its output grew (the sink's broker killed and restarted
    in the second), then a last run that drains."""
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("Java is not installed (PySpark needs a JVM, Java 17)")
    pytest.importorskip("pyspark")
    source = BrokerProcess(tmp_path / "a").start()
    sink = BrokerProcess(tmp_path / "b", join=source.address).start()
    publishers = [Publisher(source, "a"), Publisher(sink, "b")]
    job = Job(tmp_path, source.address, sink.address)
    written = Counter[bytes]()

    def progress() -> int:
        try:
            return sum(log_payloads(sink, "out/#").values())
        except (TidingsError, OSError, TimeoutError):
            return 0  # the sink's broker is down

    def grows(what: str) -> None:
        mark = progress()
        try:
            wait_for(lambda: job.alive() and progress() > mark, PROGRESS_S_MAX, 0.2, what=what)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the job's log ends:\n{job.tail()}") from None

    try:
        wait_for(lambda: sink.address in {leaf[1] for leaf in source.status()["overlay"]["leaf_set"]}, 30,
                 what="the second broker in the first one's leaf set")
        for publisher in publishers:
            publisher.start()
        for run in range(kills):
            job.start()
            grows(f"the sink's output growing in run {run}")
            if run == 1:  # the sink's broker (also a pubend of the source) dies and comes back
                sink.kill()
                sink.start()
                grows("the sink's output growing after its broker's restart")
            job.kill()
        job.start()
        grows("the sink's output growing in the last run")
        for publisher in publishers:
            publisher.stop()
        published = log_payloads(source, "in/#") + log_payloads(sink, "in/#")

        def drained() -> bool:
            nonlocal written
            written = log_payloads(sink, "out/#")  # the job keeps payloads, moving in/x to out/in/x
            return sum(written.values()) >= sum(published.values())

        try:
            wait_for(drained, DRAIN_S_MAX, 0.2, what="every event written")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the job's log ends:\n{job.tail()}") from None
    finally:
        for publisher in publishers:
            publisher.halt.set()
        job.kill()
        sink.stop()
        source.stop()
    acked = Counter(p for publisher in publishers for p in publisher.acked)
    assert acked - published == Counter(), "an acknowledged event is missing from its broker's log"
    assert max(published.values()) == 1
    assert written == published, (
        f"{sum((written - published).values())} written twice or never published, "
        f"{sum((published - written).values())} never written"
    )
    assert job.runs == kills + 1
