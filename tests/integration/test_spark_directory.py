"""A batch read and an AvailableNow run plan over the overlay's pubend directory: with one broker of
three killed -9, planning through another fails naming the dead broker's pubend and address (also
once the leaf sets have dropped it, where it used to return the others' events as if complete), or
with failOnDataLoss=false reads the others with a warning and a count. Real broker processes, the
data source's planner called without a SparkSession (tests/spark has the Spark run)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable

from tidings import sync
from tidings.spark.arrow import EVENT_SCHEMA
from tidings.spark.coverage import PubendUnreachableError
from tidings.spark.offsets import Offset
from tidings.spark.options import parse_read_options, parse_stream_options
from tidings.spark.source import TidingsReader
from tidings.spark.stream import TidingsStreamReader
from tidings.testing import Cluster

pytestmark = pytest.mark.integration

EVENTS_PER_BROKER = 300


@pytest.fixture
def overlay(tmp_path: Any) -> Iterator[tuple[Cluster, dict[str, list[int]]]]:
    """Three brokers, each with EVENTS_PER_BROKER events of its own pubend, every directory
    holding every pubend's last event: (cluster, ticks by pubend)."""
    with Cluster(tmp_path, 3) as cluster:
        ticks: dict[str, list[int]] = {}
        for i, broker in enumerate(cluster.brokers):
            with sync.connect(broker.address, service="test", instance=f"pub-{i}") as client:
                acks = client.publish_many([(f"load/h{i}", b"x" * 20, {"k": k}) for k in range(EVENTS_PER_BROKER)])
                ticks[acks[0].pubend] = [a.tick for a in acks]

        def heard() -> bool:
            for status in cluster.statuses().values():
                last = {e["pubend"]: e["last_event_tick"] for e in (status or {}).get("directory", [])}
                if any(last.get(p) != t[-1] for p, t in ticks.items()):
                    return False
            return True

        cluster.wait(heard, what="every directory holds every pubend's last event")
        yield cluster, ticks


def plan(address: str, **options: str) -> TidingsReader:
    return TidingsReader(parse_read_options({"broker": address, "pattern": "load/#", "partitions": "4", **options}),
                         EVENT_SCHEMA)


def rows(reader: TidingsReader) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for part in reader.partitions():
        for batch in reader.read(part):
            out += zip(batch.column("pubend").to_pylist(), batch.column("tick").to_pylist(), strict=True)
    return out


def pubend_of(cluster: Cluster, index: int) -> str:
    status = cluster.status(cluster[index])
    assert status is not None
    return str(status["pubend"])


def test_a_read_fails_naming_a_dead_brokers_pubend_before_and_after_the_leaf_sets_drop_it(
    overlay: tuple[Cluster, dict[str, list[int]]], caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, ticks = overlay
    dead, dead_pubend = cluster[2], pubend_of(cluster, 2)
    through = cluster[0].address
    cluster.kill(dead)
    killed_at = time.monotonic()
    pattern = f"pubend {dead_pubend} at {dead.address}"
    with pytest.raises(PubendUnreachableError, match=pattern):
        plan(through).partitions()
    soon = time.monotonic() - killed_at

    def dropped() -> bool:  # where the read used to return the others' events as if complete
        return all(dead.address not in {m[1] for m in (s or {}).get("overlay", {}).get("leaf_set", [])}
                   for s in (cluster.status(cluster[0]), cluster.status(cluster[1])))

    cluster.wait(dropped, what="the leaf sets dropped the dead broker")
    with pytest.raises(PubendUnreachableError, match=pattern):
        plan(through, startTick=str(ticks[dead_pubend][100])).partitions()
    with pytest.raises(PubendUnreachableError, match=pattern):
        plan(cluster[1].address, endTick=str(ticks[dead_pubend][0])).partitions()
    later = time.monotonic() - killed_at
    assert soon < 30 and later < 30, (soon, later)

    # with nothing of it in the range, its absence costs the read nothing
    after_all = max(t[-1] for t in ticks.values())
    assert plan(through, startTick=str(after_all + 1)).partitions()

    # failOnDataLoss=false: the others' events, each once, one warning naming it, a count
    with caplog.at_level(logging.WARNING, logger="tidings.spark"):
        reader = plan(through, failOnDataLoss="false")
        got = rows(reader)
    alive = sorted((p, t) for p, ts in ticks.items() if p != dead_pubend for t in ts)
    assert sorted(got) == alive
    assert [u.pubend for u in reader.skipped] == [dead_pubend] and reader.skipped[0].address == dead.address
    assert reader.skipped[0].records == EVENTS_PER_BROKER
    warned = [r.getMessage() for r in caplog.records if dead_pubend in r.getMessage()]
    assert len(warned) == 1 and "1 of 1 pubend(s) skipped" in warned[0], warned

    # back: the read is whole again
    dead.start()
    cluster.wait_joined()
    assert sorted(rows(plan(cluster[1].address))) == sorted((p, t) for p, ts in ticks.items() for t in ts)


def test_an_available_now_run_fails_or_skips_a_dead_brokers_pubend(
    overlay: tuple[Cluster, dict[str, list[int]]], caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, ticks = overlay
    dead, dead_pubend = cluster[1], pubend_of(cluster, 1)
    cluster.kill(dead)

    def run(fail: str) -> tuple[TidingsStreamReader, Offset, Offset]:
        reader = TidingsStreamReader(parse_stream_options({
            "broker": cluster[0].address, "pattern": "load/#", "durableName": f"an-{fail}",
            "startingOffsets": "earliest", "failOnDataLoss": fail}, 2), EVENT_SCHEMA)
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        return reader, Offset.from_json(start), Offset.from_json(reader.latestOffset(start, ReadAllAvailable()))

    with pytest.raises(PubendUnreachableError, match=f"pubend {dead_pubend} at {dead.address}"):
        run("true")
    with caplog.at_level(logging.WARNING, logger="tidings.spark"):
        reader, start, end = run("false")
        reader.latestOffset(end.to_json(), ReadAllAvailable())  # the next batch: no second warning
    assert end.position(dead_pubend) == start.position(dead_pubend)  # held back, for a later run
    assert all(end.position(p) >= ts[-1] for p, ts in ticks.items() if p != dead_pubend)
    assert list(reader.unreached) == [dead_pubend]
    skipping = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipping) == 1 and dead_pubend in skipping[0] and "AvailableNow" in skipping[0], skipping


def test_an_operator_forgets_a_decommissioned_brokers_pubend_and_reads_are_whole_without_it(
    overlay: tuple[Cluster, dict[str, list[int]]],
) -> None:
    cluster, ticks = overlay
    retired, retired_pubend = cluster[2], pubend_of(cluster, 2)
    cluster.kill(retired)  # decommissioned: it never comes back
    with pytest.raises(PubendUnreachableError, match=retired_pubend):
        plan(cluster[0].address).partitions()
    tidings = [sys.executable, "-m", "tidings.cli.main", "directory", "forget"]
    refused = subprocess.run([*tidings, "--data", str(cluster[1].data), retired_pubend], capture_output=True,
                             text=True, timeout=60, check=False)
    assert refused.returncode != 0 and "stop that broker first" in refused.stderr  # it is running
    cluster[1].stop()
    done = subprocess.run([*tidings, "--data", str(cluster[1].data), retired_pubend], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and json.loads(done.stdout)["forgotten"] == retired_pubend, done.stderr
    cluster[1].join = cluster[0].address
    cluster[1].start()

    def forgotten() -> bool:
        return all(retired_pubend not in {e["pubend"] for e in (cluster.status(b) or {}).get("directory", [])}
                   for b in cluster.brokers[:2])

    cluster.wait(forgotten, what="every running broker forgot the retired pubend")
    assert sorted(rows(plan(cluster[0].address))) == sorted(
        (p, t) for p, ts in ticks.items() if p != retired_pubend for t in ts)
