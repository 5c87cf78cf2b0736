"""Pipeline jobs over event streams and archives read with the `tidings` data source.

`load_summary` ranks hosts by mean load in a batch read of `nodes/<host>/load`. `health_stream` is
the PLDB value-add service of `make run` (the PsEPR paper's §4.4): a structured-streaming query over
a durable subscription to the monitors' load reports that scores each site's health per event-time
window and publishes one recommendation per (site, window) through the exactly-once sink.
`archive_plots` is its batch job over the archive: PNG plots of events per second per channel,
per-site load and delivery latency.

Windows are tumbling, HEALTH_WINDOW_S long, aligned to the Unix epoch (Spark's `window`), on the
events' `time` (their tick). A window is emitted once the watermark (the highest time seen less
WATERMARK_S) passes its end, in `append` mode, so each (site, window) is published once and final:
its row's `key` is `<site>/<window start in microseconds>`. The last windows of a run are emitted
only when a later event moves the watermark: a producer that stops publishing sends one more
report (any channel the query reads) HEALTH_WINDOW_S + WATERMARK_S after its last, a punctuation
(its site is a window of its own that is never emitted; `archive_plots` leaves out events with the
attribute `punctuation` true).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidings.core.channels import validate_pattern

TOP_HOSTS = 10
HEALTH_WINDOW_S = 2
WATERMARK_S = 1
LOAD_BUSY = 4.0  # a host reporting a load at or above this is busy
HEALTH_AVOID_BELOW = 50.0  # a site whose health is below this is to be avoided
RECOMMEND_PREFIX = "pldb/recommend/"


# The columns each job reads (Spark does not tell a Python source which columns a query uses, and
# a read that names them leaves the others out: docs/spark.md#schema)
SUMMARY_COLUMNS = "channel string, attributes map<string,string>"
ARCHIVE_COLUMNS = "channel string, pubend string, tick bigint, attributes map<string,string>"


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
    reader = (spark.read.format("tidings").schema(SUMMARY_COLUMNS).option("broker", broker)
              .option("pattern", pattern))
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


def health_rows(events: Any) -> Any:
    """Per (site, window): events, mean load and health (percent of reports below LOAD_BUSY), as
    the sink's columns channel, payload (JSON), attributes and key. Rows of one micro-batch come
    in no order (Spark sorts a stream only in complete mode); a window is emitted once, in the
    first micro-batch after the watermark passed its end, so a site's later windows come in the same
    or later micro-batches."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    load = F.col("attributes").getItem("load").try_cast("double")
    site = F.col("attributes").getItem("site")
    scored = (events.withWatermark("time", f"{WATERMARK_S} seconds")
              .select("time", site.alias("site"), load.alias("load"))
              .where(F.col("site").isNotNull() & F.col("load").isNotNull())
              .groupBy(F.window("time", f"{HEALTH_WINDOW_S} seconds"), "site")
              .agg(F.count(F.lit(1)).alias("events"), F.avg("load").alias("mean_load"),
                   (F.avg(F.when(F.col("load") < LOAD_BUSY, 1.0).otherwise(0.0)) * 100).alias("health")))
    start = F.unix_micros(F.col("window.start"))
    advice = F.when(F.col("health") < HEALTH_AVOID_BELOW, "avoid").otherwise("use")
    return scored.select(
        F.concat(F.lit(RECOMMEND_PREFIX), "site").alias("channel"),
        F.to_json(F.struct("site", start.alias("window_start_us"), "events", "mean_load", "health",
                           advice.alias("advice"))).alias("payload"),
        F.create_map(F.lit("site"), F.col("site"), F.lit("window_start_us"), start.cast("string"),
                     F.lit("events"), F.col("events").cast("string"), F.lit("health"),
                     F.format_number("health", 1), F.lit("advice"), advice).alias("attributes"),
        F.concat_ws("/", "site", start.cast("string")).alias("key"))


def health_stream(spark: Any, broker: str, checkpoint: str, *, sink_broker: str | None = None,
                  durable_name: str = "pldb-health", pattern: str = "nodes/+/load", trigger_s: float = 1.0) -> Any:
    """Start the health query: a durable stream of `pattern` at `broker` (from its earliest event
    when new), windowed per site, published to `pldb/recommend/<site>` at `sink_broker` (default
    `broker`). Returns the StreamingQuery; stop it with `query.stop()`, restart it with the same
    `checkpoint` and `durable_name` to go on exactly where it was."""
    from tidings.spark.source import register  # noqa: PLC0415

    register(spark)
    events = (spark.readStream.format("tidings").option("broker", broker).option("pattern", pattern)
              .option("durableName", durable_name).option("startingOffsets", "earliest").load())
    return (health_rows(events).writeStream.format("tidings").outputMode("append").queryName(durable_name)
            .option("broker", sink_broker or broker).option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{trigger_s} seconds").start())


PLOTS = ("events_per_second.png", "site_load.png", "delivery_latency.png")


def archive_plots(spark: Any, broker: str, out: Any, deliveries: list[tuple[str, int, int]]) -> list[Any]:
    """Draw the archive's plots into the directory `out` (a Path) and return their paths: events
    per second per channel (`nodes/+/<metric>`, `pldb/<kind>/+`), mean load per site per second, and
    the delivery latency per second (p50, p99) of `deliveries`, (pubend, tick, received_ns) of events
    as one subscriber received them (wall clock), joined with the archive. Events with the attribute
    `punctuation` true are left out. Needs matplotlib."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415

    from tidings.spark.source import register  # noqa: PLC0415

    register(spark)
    archive = (spark.read.format("tidings").schema(ARCHIVE_COLUMNS).option("broker", broker).option("pattern", "#")
               .load()
               .where(F.coalesce(F.col("attributes").getItem("punctuation"), F.lit("false")) != "true").cache())
    second = F.floor(F.col("tick") / 1_000_000).cast("long")
    parts = F.split("channel", "/")
    group = (F.when((F.size(parts) == 3) & (parts.getItem(0) == "nodes"),  # nodes/<host>/<metric>
                    F.concat_ws("/", parts.getItem(0), F.lit("+"), parts.getItem(2)))
             .when(F.size(parts) == 3, F.concat_ws("/", parts.getItem(0), parts.getItem(1), F.lit("+")))
             .otherwise(F.col("channel")))
    rates = (archive.select(second.alias("s"), group.alias("channel")).groupBy("s", "channel").count()
             .orderBy("s").toPandas())
    site_load = (archive.where(F.col("channel").like("nodes/%/load"))
                 .select(second.alias("s"), F.col("attributes").getItem("site").alias("site"),
                         F.col("attributes").getItem("load").try_cast("double").alias("load"))
                 .groupBy("s", "site").agg(F.avg("load").alias("load")).orderBy("s").toPandas())
    latency = None
    if deliveries:
        got = spark.createDataFrame(deliveries, "pubend string, tick long, received_ns long")
        latency = (archive.join(got, ["pubend", "tick"])
                   .select(second.alias("s"), ((F.col("received_ns") / 1000 - F.col("tick")) / 1000).alias("ms"))
                   .groupBy("s").agg(F.percentile_approx("ms", 0.5).alias("p50"),
                                     F.percentile_approx("ms", 0.99).alias("p99"))
                   .orderBy("s").toPandas())
    archive.unpersist()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, frame, series, ylabel in (
            (PLOTS[0], rates, "channel", "events per second"),
            (PLOTS[1], site_load, "site", "mean load"),
            (PLOTS[2], latency, None, "publish to subscriber, ms")):
        if name == PLOTS[0] and series is not None and frame is not None and len(frame):
            fig = _small_multiples(plt, frame, series, "count", ylabel)
        else:
            fig, ax = plt.subplots(figsize=(8, 4))
            if frame is not None and len(frame):
                t0 = frame["s"].min()
                if series is None:
                    for col in ("p50", "p99"):
                        ax.plot(frame["s"] - t0, frame[col], label=col)
                else:
                    for key, rows in frame.groupby(series):
                        ax.plot(rows["s"] - t0, rows["load"], label=str(key))
                ax.legend(fontsize="small")
            ax.set_xlabel("seconds since the first event")
            ax.set_ylabel(ylabel)
        fig.suptitle(name.removesuffix(".png").replace("_", " "))
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        paths.append(out / name)
    return paths


def _small_multiples(plt: Any, frame: Any, series: str, value: str, ylabel: str) -> Any:
    """One panel per series, sharing the time axis, each with its own y range: series of very
    different rates (thousands of load reports a second, a few recommendations) each show, and
    two that run at the same rate do not hide each other, as they did on one axis."""
    groups = list(frame.groupby(series))
    t0 = frame["s"].min()
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 1.3 + 1.4 * len(groups)), sharex=True, squeeze=False)
    for ax, (key, rows) in zip(axes[:, 0], groups, strict=True):
        ax.plot(rows["s"] - t0, rows[value], marker=".", markersize=3)
        ax.set_ylim(bottom=0, top=max(1.0, float(rows[value].max())) * 1.15)
        ax.set_title(f"{key}  (peak {int(rows[value].max()):,}/s)", loc="left", fontsize="small")
        ax.tick_params(labelsize="small")
    axes[-1, 0].set_xlabel("seconds since the first event")
    fig.supylabel(ylabel)
    return fig
