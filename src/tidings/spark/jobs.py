"""Pipeline jobs over event archives read with the `tidings` data source.

`load_summary` is the analytics step of the `make run` demo: monitoring agents publish their load
on `nodes/<host>/load` with a numeric attribute `load`, and the job ranks the hosts by mean load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidings.core.channels import validate_pattern

TOP_HOSTS = 10


def host_segment(pattern: str) -> int | None:
    """The channel segment that names the host: the one the pattern's first `+` stands for."""
    segments = validate_pattern(pattern).split("/")
    return segments.index("+") if "+" in segments else None


def load_summary(
    spark: Any, broker: str, pattern: str = "nodes/+/load", *, options: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Per host: how many events carry a numeric `load`, its mean and its maximum; the top 10
    hosts by mean load, highest first (ties by host name).

    The host is the channel segment matched by the pattern's first `+` (`nodes/<host>/load`), or
    the whole channel for a pattern without `+`. Events whose `load` is missing or not a number are
    left out. `options` adds reader options (filter, startTime, ...).
    Returns dicts with keys host, count, mean_load, max_load.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415

    from tidings.spark.source import register  # noqa: PLC0415

    register(spark)
    segment = host_segment(pattern)
    reader = spark.read.format("tidings").option("broker", broker).option("pattern", pattern)
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    events = reader.load()
    host = F.col("channel") if segment is None else F.split(F.col("channel"), "/", -1).getItem(segment)
    load = F.col("attributes").getItem("load").try_cast("double")
    summary = (
        events.select(host.alias("host"), load.alias("load"))
        .where(F.col("load").isNotNull() & ~F.isnan(F.col("load")))
        .groupBy("host")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.avg("load").alias("mean_load"),
            F.max("load").alias("max_load"),
        )
        .orderBy(F.desc("mean_load"), F.asc("host"))
        .limit(TOP_HOSTS)
    )
    return [row.asDict() for row in summary.collect()]
