"""Data sources for bench/spark_read_parts.py, imported by Spark's Python workers (the bench puts
this directory on their PYTHONPATH): the tidings read with its tasks timed, and the same Arrow
batches served again from a worker's memory (what Spark itself costs per batch of these rows)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from tidings.spark import reading
from tidings.spark.arrow import EVENT_SCHEMA
from tidings.spark.source import TidingsDataSource, TidingsReader

TASKS_FILE = "TIDINGS_BENCH_TASKS"  # the environment variable naming where tasks append their times

_decode_s = [0.0]


def _timed(decode: Any) -> Any:
    """`decode`, adding the thread's CPU time it takes to _decode_s."""
    def timed(*args: Any) -> Any:
        started = time.thread_time()
        try:
            return decode(*args)
        finally:
            _decode_s[0] += time.thread_time() - started
    return timed


# the reading module looks them up at each call: RECORDS, and SPAN (checked and decoded in the task)
reading.records_to_batch = _timed(reading.records_to_batch)
reading.span_to_batch = _timed(reading.span_to_batch)


class TimedReader(TidingsReader):
    _guard_class = None  # restored as itself: workers import this module

    def read(self, partition: Any) -> Iterator[Any]:
        _decode_s[0], rows, inside = 0.0, 0, 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        batches = super().read(partition)
        try:
            while True:
                started = time.perf_counter()
                batch = next(batches, None)
                inside += time.perf_counter() - started
                if batch is None:
                    break
                rows += batch.num_rows
                yield batch
        finally:
            with open(os.environ[TASKS_FILE], "a") as out:
                out.write(json.dumps({"rows": rows, "task_s": time.perf_counter() - wall, "reading_s": inside,
                                      "decode_cpu_s": _decode_s[0], "task_cpu_s": time.process_time() - cpu}) + "\n")


class TimedSource(TidingsDataSource):
    _guard_class = None

    @classmethod
    def name(cls) -> str:
        return "tidings_timed"

    def reader(self, schema: Any) -> Any:
        return TimedReader(self.read_options(), schema)


_kept: dict[int, list[pa.RecordBatch]] = {}  # per partition, in this worker


class KeptReader(TidingsReader):
    _guard_class = None

    def read(self, partition: Any) -> Iterator[Any]:
        if partition.index not in _kept:  # the warm-up rounds fill it, in every worker
            _kept[partition.index] = list(super().read(partition))
        yield from _kept[partition.index]


class KeptSource(TidingsDataSource):
    _guard_class = None

    @classmethod
    def name(cls) -> str:
        return "tidings_kept"

    def reader(self, schema: Any) -> Any:
        return KeptReader(self.read_options(), EVENT_SCHEMA)
