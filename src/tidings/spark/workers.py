"""Which Python runs the data source's workers, and what it needs: the tidings package.

Spark runs a Python data source in Python worker processes: on the driver's machine to plan a
read, on the executors to read. Each runs the interpreter Spark was told of when the SparkContext
started (`spark.pyspark.python`, else the environment variable PYSPARK_PYTHON, else `python3` on
the PATH), not the one running the job. A job started as `.venv/bin/python job.py` without an
activated venv therefore plans and reads with the system's `python3`, which has no tidings.

What this module does about it:

- `worker_python(spark)`, around the data source's registration (source.register): on a local
  master, where the workers run on this machine, it checks that the configured interpreter can
  import the data source as a worker would (tidings with its dependencies and pyarrow, next to
  the pyspark Spark gives its workers; once per interpreter and path) and, if it cannot, registers the data source to
  run on this very interpreter, with this process's path to tidings if it needs it. A cluster's executors are
  elsewhere and are not checked here.
- `session_settings()` gives the configuration that makes executors run this interpreter with this
  path: for a SparkSession builder (`configure`), before the session starts. PySpark itself takes
  `spark.pyspark.python` only when spark-submit starts the job; a job started as `python job.py`
  gets PYSPARK_PYTHON's interpreter (else `python3`) for its Python functions whatever the
  setting says, so the registration gives the data source's functions the configured one.
- A worker that still cannot import tidings fails its task with one ImportError line naming the
  fix (guard.py); docs/spark.md ("Deployment") says what executors need.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger("tidings.spark")

CHECK_S_MAX = 60.0  # an import of tidings by the worker's interpreter
_checked: dict[tuple[str, str], bool] = {}  # (interpreter, PYTHONPATH) -> imports tidings


def tidings_path() -> str:
    """The directory this process imports tidings from (the parent of the package)."""
    import tidings  # noqa: PLC0415

    return str(Path(tidings.__file__).resolve().parent.parent)


def session_settings() -> dict[str, str]:
    """Spark configuration for executors that run this interpreter and import this tidings."""
    return {
        "spark.pyspark.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": _joined(tidings_path(), os.environ.get("PYTHONPATH", "")),
    }


def configure(builder: Any) -> Any:
    """A SparkSession builder with `session_settings()`; returns the builder."""
    for key, value in session_settings().items():
        builder = builder.config(key, value)
    return builder


def spark_worker_path() -> str:
    """The pyspark and py4j archives Spark puts on its Python workers' path (empty if not found)."""
    import pyspark  # noqa: PLC0415

    homes = [Path(pyspark.__file__).parent, *([Path(os.environ["SPARK_HOME"])] if "SPARK_HOME" in os.environ else [])]
    for home in homes:
        archives = sorted(str(p) for p in (home / "python" / "lib").glob("*.zip"))
        if archives:
            return os.pathsep.join(archives)
    return ""


def imports_tidings(python: str, pythonpath: str) -> bool:
    """Whether `python`, with `pythonpath` and Spark's own pyspark, can import the data source as a
    Spark worker does: `import tidings` alone passes on an interpreter that has the source tree on
    its path but lacks msgpack or pyarrow (remembered per pair)."""
    key = (python, pythonpath)
    if key not in _checked:
        env = {**os.environ, "PYTHONPATH": _joined(pythonpath, spark_worker_path())}
        try:
            done = subprocess.run([python, "-c", "import tidings.spark.source, tidings.sync"], env=env,
                                  capture_output=True,
                                  timeout=CHECK_S_MAX, check=False)
            _checked[key] = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _checked[key] = False
    return _checked[key]


@contextlib.contextmanager
def worker_python(spark: Any) -> Iterator[None]:
    """Within: a registration whose workers run the configured interpreter, and on a local master
    one that can import tidings (see the module doc)."""
    try:
        sc = spark.sparkContext
        local = str(sc.master).startswith("local")
        python, environment = sc.pythonExec, sc.environment
        configured = sc.getConf().get("spark.pyspark.python") or python
    except Exception:  # Spark Connect: no SparkContext here; the server's workers are its business
        yield
        return
    pythonpath = _joined(environment.get("PYTHONPATH", ""), os.environ.get("PYTHONPATH", ""))
    saved = environment.get("PYTHONPATH")
    if local and configured != sys.executable and not imports_tidings(configured, pythonpath):
        logger.info("tidings: Spark's Python workers run %s, which cannot import tidings; the tidings data "
                    "source runs its workers on %s instead", configured, sys.executable)
        configured = sys.executable
        if not imports_tidings(sys.executable, pythonpath):  # tidings is on this process's sys.path only
            environment["PYTHONPATH"] = _joined(tidings_path(), saved or "")
    sc.pythonExec = configured
    try:
        yield
    finally:
        sc.pythonExec = python
        if saved is None:
            environment.pop("PYTHONPATH", None)
        else:
            environment["PYTHONPATH"] = saved


def _joined(*paths: str) -> str:
    parts: list[str] = []
    for path in paths:
        parts += [p for p in path.split(os.pathsep) if p and p not in parts]
    return os.pathsep.join(parts)
