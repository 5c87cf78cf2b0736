"""Workers without tidings: the data source, its readers and writers unpickle in a Python that
has only Spark's pyspark into one ImportError line naming the fix (guard.py), and round-trip as
before where tidings is installed."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark import cloudpickle
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from tidings.spark import workers
from tidings.spark.arrow import EVENT_SCHEMA
from tidings.spark.source import TidingsDataSource

OPTIONS = {"broker": "127.0.0.1:1", "pattern": "a/#"}
SINK = StructType([StructField("channel", StringType()), StructField("payload", BinaryType())])


def shipped() -> dict[str, Any]:
    """What Spark ships to workers: the data source (register's run-time subclass), its readers and writers."""
    bound = type("TidingsDataSourceBound", (TidingsDataSource,), {"default_partitions": 3, "pushdown": False})
    source = bound(OPTIONS)
    sink = bound({"broker": "127.0.0.1:1"})
    return {
        "source": source,
        "reader": source.reader(EVENT_SCHEMA),
        "stream reader": bound({**OPTIONS, "durableName": "q"}).streamReader(EVENT_SCHEMA),
        "writer": sink.writer(SINK, overwrite=False),
        "stream writer": sink.streamWriter(SINK, overwrite=False),
    }


def test_they_round_trip_where_tidings_is_installed() -> None:
    for name, obj in shipped().items():
        clone = cloudpickle.loads(cloudpickle.dumps(obj))
        assert type(clone).__name__ in (type(obj).__name__, "TidingsDataSource"), name
        assert {k: v for k, v in vars(clone).items() if k not in ("default_partitions", "pushdown")} == vars(obj)
    source = cloudpickle.loads(cloudpickle.dumps(shipped()["source"]))
    assert source.read_options().partitions == 3 and source.pushdown is False


def test_a_worker_without_tidings_gets_one_line_naming_the_fix(tmp_path: Any) -> None:
    """The worker: this interpreter without site-packages (no tidings, msgpack or pyarrow), with
    the pyspark and py4j archives Spark puts on its workers' path."""
    loader = ("import sys; from pyspark import cloudpickle\n"
              "for path in sys.argv[1:]:\n"
              "    try:\n        cloudpickle.loads(open(path, 'rb').read())\n"
              "    except ImportError as exc:\n        print(type(exc).__name__, exc)\n")
    objects = shipped()
    paths = []
    for i, obj in enumerate(objects.values()):
        paths.append(tmp_path / f"payload-{i}")
        paths[-1].write_bytes(cloudpickle.dumps(obj))
    done = subprocess.run([sys.executable, "-S", "-c", loader, *map(str, paths)], capture_output=True, text=True,
                          env={"PYTHONPATH": workers.spark_worker_path()}, timeout=60, check=False)
    assert done.returncode == 0 and not done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(objects), lines  # one line each, nothing unpickled without tidings
    for name, line in zip(objects, lines, strict=True):
        assert line.startswith("ImportError tidings: this Spark worker's Python"), (name, line)
        assert "cannot import tidings.spark." in line and "pip install 'tidings[spark]'" in line, (name, line)
        assert "workers.configure(builder)" in line, (name, line)
