"""PySpark integration: the `tidings` data source and the pipeline jobs built on it.

    from tidings.spark import register
    register(spark)
    df = spark.read.format("tidings").option("broker", "127.0.0.1:7400").option("pattern", "a/#").load()
    df.select("channel", "payload").write.format("tidings").mode("append").option("broker", "127.0.0.1:7400").save()

Importing this package does not import PySpark; `register` and `TidingsDataSource` do.
`quiet_errors(spark)` makes a job that dies of a tidings error print its one line (errors.py).
"""

from __future__ import annotations

from typing import Any

from tidings.spark.errors import quiet_errors

__all__ = ["TidingsDataSource", "quiet_errors", "register"]


def register(spark: Any, default_partitions: int | None = None, *, pushdown: bool = False) -> Any:
    """Register the `tidings` format with `spark` (see tidings.spark.source.register)."""
    from tidings.spark.source import register as _register  # noqa: PLC0415

    return _register(spark, default_partitions, pushdown=pushdown)


def __getattr__(name: str) -> Any:
    if name == "TidingsDataSource":
        from tidings.spark.source import TidingsDataSource  # noqa: PLC0415

        return TidingsDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
