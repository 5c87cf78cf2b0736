"""End to end: a real broker process, events published with `tidings.sync`, read back with Spark.

Every check compares whole rows against what was published, so a lost, duplicated or altered
event, or a wrong value in any column, fails the test.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tidings import sync
from tidings.core.channels import pattern_matches
from tidings.core.event import Event, tick_to_datetime
from tidings.testing import BrokerProcess, wait_for

pytestmark = pytest.mark.spark

HOSTS = [f"h{i:02d}" for i in range(12)]  # more than the 10 hosts load_summary keeps
SITES = ["eu-west", "us-east", "ap-south"]
CHUNKS = 12
CHUNK_EVENTS = 30


@dataclass(frozen=True)
class Published:
    address: str
    events: list[Event]  # in tick order, with the ticks the broker gave them


def _attributes_and_channel(rng: random.Random, i: int) -> tuple[str, dict[str, Any]]:
    host = HOSTS[i % len(HOSTS)]
    kind = rng.random()
    if kind < 0.6:
        attrs: dict[str, Any] = {"host": host, "site": SITES[i % len(SITES)], "up": i % 7 != 0, "n": i}
        shape = rng.random()
        if shape < 0.7:
            attrs["load"] = round(rng.uniform(0.0, 6.0), 3)
        elif shape < 0.85:
            attrs["load"] = rng.randint(0, 6)  # an integer load: rendered "3", cast back to 3.0
        elif shape < 0.93:
            attrs["load"] = "n/a"  # not a number: no filter match, left out of the summary
        return f"nodes/{host}/load", attrs  # else: no load attribute at all
    if kind < 0.8:
        return f"nodes/{host}/mem", {"host": host, "mem_free_mb": rng.randint(100, 8000)}
    if kind < 0.9:
        return f"nodes/{host}/load/detail", {"load": 5.5}  # one level too deep for nodes/+/load
    return "sys/health", {}


def _publish(address: str, chunks: int, chunk_events: int, payload_max: int, seed: int) -> list[Event]:
    rng = random.Random(seed)
    events: list[Event] = []
    clients = {name: sync.connect(address, service="e2e", instance=name) for name in ("pub-a", "pub-b")}
    try:
        for c in range(chunks):
            instance = "pub-a" if c % 2 == 0 else "pub-b"
            items = []
            for k in range(chunk_events):
                channel, attrs = _attributes_and_channel(rng, c * chunk_events + k)
                items.append((channel, rng.randbytes(rng.randint(0, payload_max)), attrs))
            results = clients[instance].publish_many(items)
            for (channel, payload, attrs), res in zip(items, results, strict=True):
                events.append(Event(res.pubend, res.tick, channel, attrs, "e2e", instance, payload))
    finally:
        for client in clients.values():
            client.close()
    events.sort(key=lambda e: e.tick)
    assert len({e.tick for e in events}) == len(events)
    return events


@pytest.fixture(scope="module")
def published(start_broker: Callable[..., BrokerProcess]) -> Published:
    broker = start_broker()
    return Published(broker.address, _publish(broker.address, CHUNKS, CHUNK_EVENTS, 40, seed=1122))


def render(value: object) -> str:
    """The attribute rendering docs/spark.md promises, written out independently."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value)


def expected_row(e: Event) -> dict[str, Any]:
    return {
        "channel": e.channel, "pubend": e.pubend, "tick": e.tick, "time_us": e.tick,
        "source_service": e.service, "source_instance": e.instance, "source_authenticated": e.authenticated,
        "attributes": {k: render(v) for k, v in e.attributes.items()}, "payload": e.payload,
    }


def collect_rows(df: Any) -> list[dict[str, Any]]:
    """Rows as plain dicts in tick order, with the time as microseconds (zone-proof) and its partition."""
    from pyspark.sql import functions as F

    columns = [c for c in df.columns if c != "time"]
    table = df.select(*columns, F.unix_micros("time").alias("time_us"), F.spark_partition_id().alias("part"))
    rows = []
    for row in table.collect():
        d = row.asDict()
        d["payload"] = bytes(d["payload"])
        rows.append(d)
    return sorted(rows, key=lambda d: d["tick"])


def without(rows: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in keys} for row in rows]


def load_above(e: Event, threshold: float) -> bool:
    load = e.attributes.get("load")
    return isinstance(load, int | float) and not isinstance(load, bool) and load > threshold


def read(spark: Any, address: str, pattern: str, **options: str) -> Any:
    reader = spark.read.format("tidings").option("broker", address).option("pattern", pattern)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_pattern_filter_and_tick_range_over_three_partitions(spark: Any, published: Published) -> None:
    from tidings.spark.arrow import EVENT_SCHEMA

    events = published.events
    start, end = events[40].tick, events[300].tick
    df = read(spark, published.address, "nodes/+/load", filter="load > 2.5",
              startTick=str(start), endTick=str(end), partitions="3")
    assert df.schema == EVENT_SCHEMA
    assert df.rdd.getNumPartitions() == 3
    rows = collect_rows(df)
    want = [expected_row(e) for e in events
            if start <= e.tick <= end and pattern_matches("nodes/+/load", e.channel) and load_above(e, 2.5)]
    assert len(want) > 40  # the workload gives the check something to bite on
    assert without(rows, "part") == want
    # each task read one contiguous tick range: partitions never interleave
    parts = sorted({r["part"] for r in rows})
    spans = [(min(r["tick"] for r in rows if r["part"] == p), max(r["tick"] for r in rows if r["part"] == p))
             for p in parts]
    assert all(spans[i][1] < spans[i + 1][0] for i in range(len(spans) - 1))


def test_whole_log_by_default_and_time_range(spark: Any, published: Published) -> None:
    events = published.events
    rows = collect_rows(read(spark, published.address, "#"))
    assert without(rows, "part") == [expected_row(e) for e in events]
    assert {r["part"] for r in rows} <= {0, 1}  # default partitions: the session's parallelism, 2

    start, end = events[100], events[200]
    df = read(spark, published.address, "nodes/#",
              startTime=tick_to_datetime(start.tick).isoformat(),
              endTime=tick_to_datetime(end.tick).isoformat().replace("+00:00", "Z"))
    assert without(collect_rows(df), "part") == [
        expected_row(e) for e in events[100:201] if e.channel.startswith("nodes/")
    ]


def test_a_read_given_some_columns_builds_and_ships_only_those(spark: Any, published: Published) -> None:
    """Spark's Python data sources are not told which columns a query uses: a job names them in
    its own schema, in its own order, and gets those columns of the same rows."""
    df = (spark.read.format("tidings").schema("tick bigint, channel string, attributes map<string,string>")
          .option("broker", published.address).option("pattern", "nodes/#").load())
    assert df.columns == ["tick", "channel", "attributes"]
    rows = sorted((r.tick, r.channel, dict(r.attributes)) for r in df.collect())
    want = [(row["tick"], row["channel"], row["attributes"]) for row in
            (expected_row(e) for e in published.events if e.channel.startswith("nodes/"))]
    assert rows == want
    with pytest.raises(Exception, match="a read's schema takes some of the columns"):
        spark.read.format("tidings").schema("host string").option("broker", published.address).load().collect()


def test_load_summary(spark: Any, published: Published) -> None:
    from tidings.spark.jobs import load_summary

    loads: dict[str, list[float]] = {}
    for e in published.events:
        load = e.attributes.get("load")
        if pattern_matches("nodes/+/load", e.channel) and isinstance(load, int | float):
            loads.setdefault(e.channel.split("/")[1], []).append(float(load))
    summaries = [{"host": h, "count": len(v), "mean_load": sum(v) / len(v), "max_load": max(v)}
                 for h, v in loads.items()]
    want = sorted(summaries, key=lambda d: (-d["mean_load"], d["host"]))[:10]
    got = load_summary(spark, published.address)
    assert [(d["host"], d["count"], d["max_load"]) for d in got] == [
        (d["host"], d["count"], d["max_load"]) for d in want
    ]
    assert [d["mean_load"] for d in got] == pytest.approx([d["mean_load"] for d in want], rel=1e-12)
    assert len(loads) > 10 and len(got) == 10


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"broker": "127.0.0.1:1"}, '"pattern" is required'),
        ({"broker": "127.0.0.1:1", "pattern": "a/#", "filter": "load >"}, '"filter" is invalid'),
    ],
)
def test_bad_options_fail_load_on_the_driver(spark: Any, options: dict[str, str], message: str) -> None:
    # the unit tests go through every option; here: the error reaches the user at load(), named
    reader = spark.read.format("tidings")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=message):
        reader.load()


def test_released_events_fail_the_read_or_are_skipped(
    spark: Any, start_broker: Callable[..., BrokerProcess]
) -> None:
    broker = start_broker({"segment_bytes_max": 4096, "retention_bytes_max": 8192,
                           "retention_check_interval_ns": 50_000_000})
    events = _publish(broker.address, 10, 30, 100, seed=7)
    with sync.connect(broker.address, service="e2e", instance="watch") as client:
        wait_for(lambda: client.status()["released_through"] > events[0].tick, timeout=20,
                 what="retention releasing the oldest events")
        first = str(events[0].tick)
        with pytest.raises(Exception, match=r"released by the broker's retention.*failOnDataLoss"):
            read(spark, broker.address, "#", startTick=first).collect()
        rows = collect_rows(read(spark, broker.address, "#", startTick=first, failOnDataLoss="false"))
        released = client.status()["released_through"]  # after the read: covers a release during it
    kept = [expected_row(e) for e in events if e.tick > released]
    assert kept and len(kept) < len(events)
    assert without(rows, "part") == kept


def test_a_secured_broker_over_tls_with_a_credential(spark: Any, tmp_path: Any) -> None:
    """The read authenticates and checks the broker's certificate; the rows' source is the
    authenticated publisher, and says so; a pattern outside the reader's rules fails the read on the driver."""
    from tidings.aio.auth_file import add_identity
    from tidings.aio.tls import client_context, make_dev_certs
    from tidings.core.auth.credentials import KdfParams

    auth, kdf = tmp_path / "auth.toml", KdfParams(n=1 << 10)
    writer = str(add_identity(auth, "loadmon", [], ["load/#"], [], kdf))
    reader = str(add_identity(auth, "reader", [], [], ["load/#"], kdf))
    certs = make_dev_certs(tmp_path / "tls", ["127.0.0.1"])
    args = ["--auth", str(auth), "--tls-cert", str(certs["cert_pem"]), "--tls-key", str(certs["cert_key"])]
    tls = client_context(certs["ca_pem"])
    with BrokerProcess(tmp_path / "b", args=args, credential=reader, tls=tls) as broker:
        with sync.connect(broker.address, credential=writer, tls=tls) as client:
            ticks = [r.tick for r in client.publish_many([("load/h1", b"1"), ("load/h2", b"2")])]
        secured = {"credential": reader, "tlsCa": str(certs["ca_pem"])}
        rows = read(spark, broker.address, "load/#", **secured).collect()
        assert sorted(r["tick"] for r in rows) == ticks
        assert {(r["source_service"], r["source_authenticated"]) for r in rows} == {("loadmon", True)}
        with pytest.raises(Exception, match="may not subscribe"):
            read(spark, broker.address, "#", **secured).collect()
