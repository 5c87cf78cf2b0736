"""The tidings data source on a Spark standalone cluster: a master and one worker in their own JVMs,
started from the installed PySpark (`spark-class`), bound to 127.0.0.1 and stopped at the end; a
job (spark_cluster_job.py, its own process) connects to the master through
`tidings.spark.workers.configure`, reads every event of a broker with a batch read and writes them
back with the exactly-once sink. Each published event is read once and written once, and the tasks
ran in the worker's executors, not in the driver.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tidings import sync
from tidings.testing import BrokerProcess, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.integration]

JOB = Path(__file__).with_name("spark_cluster_job.py")
START_S_MAX = 60.0  # a JVM under load
JOB_S_MAX = 150.0
DAEMON_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """One standalone daemon (`spark-class CLASS ARGS`) in its own process group, its log in a file."""

    def __init__(self, spark_home: Path, log: Path, cls: str, *args: str) -> None:
        self.log = log
        env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTIONS, "SPARK_DAEMON_MEMORY": "512m",
               "PYSPARK_PYTHON": sys.executable}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([str(spark_home / "bin" / "spark-class"), cls, *args], stdout=out,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def says(self, text: str) -> bool:
        assert self.proc.poll() is None, f"{self.log.name} exited:\n{self.text()}"
        return text in self.text()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to its group (spark-class, its JVM), then SIGKILL after a deadline."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(15)
                break
            except subprocess.TimeoutExpired:
                continue


def test_a_batch_read_and_a_sink_write_on_a_standalone_cluster(tmp_path: Path) -> None:
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("Java is not installed (PySpark needs a JVM, Java 17)")
    pyspark = pytest.importorskip("pyspark")
    spark_home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    if not (spark_home / "bin" / "spark-class").exists():
        pytest.skip(f"no bin/spark-class under {spark_home}: cannot start a standalone master")
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    daemons: list[Daemon] = []
    with BrokerProcess(tmp_path / "broker") as broker:
        with sync.connect(broker.address, service="test", instance="pub") as client:
            client.publish_many([(f"in/h{i % 3}", f"event {i}".encode(), {"i": i}) for i in range(300)])
        try:
            master = Daemon(spark_home, tmp_path / "master.log", "org.apache.spark.deploy.master.Master",
                            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()))
            daemons.append(master)
            wait_for(lambda: master.says("ALIVE"), START_S_MAX, 0.2, what="the master elected leader")
            worker = Daemon(spark_home, tmp_path / "worker.log", "org.apache.spark.deploy.worker.Worker",
                            master_url, "--host", "127.0.0.1", "--port", str(free_port()),
                            "--webui-port", str(free_port()), "--cores", "2", "--memory", "1g",
                            "--work-dir", str(tmp_path / "work"))
            daemons.append(worker)
            wait_for(lambda: worker.says("Successfully registered with master"), START_S_MAX, 0.2,
                     what="the worker registered with the master")
            job = subprocess.run([sys.executable, str(JOB), master_url, broker.address], capture_output=True,
                                 text=True, timeout=JOB_S_MAX, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
                                 check=False)
        finally:
            for daemon in reversed(daemons):
                daemon.stop()
        assert job.returncode == 0, job.stderr[-4000:]
        result = json.loads(job.stdout.strip().splitlines()[-1])
        with sync.connect(broker.address, service="test", instance="check") as client:
            written = Counter(event.payload.decode() for event in client.read("out/#", after=0))
    published = Counter(f"event {i}" for i in range(300))
    assert Counter(result["read"]) == published
    assert written == published
    work = str((tmp_path / "work").resolve())
    assert result["task_dirs"] and all(d.startswith(work) for d in result["task_dirs"]), result["task_dirs"]
