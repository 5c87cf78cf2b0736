"""The batch read over a fake overlay of brokers, without a JVM: every pubend once, connections
that stay where they were sent, tick 0, missing brokers, early stops, pushdown and worker Python."""

from __future__ import annotations

import gc
import logging
import pickle
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNotNull, LessThanOrEqual, StringStartsWith

from tests.unit.spark_overlay_fake import BulkReads, FakeBroker
from tidings import sync
from tidings.core.channels import pattern_matches
from tidings.core.event import Event
from tidings.spark import overlay, workers
from tidings.spark.arrow import EVENT_SCHEMA, arrow_schema
from tidings.spark.options import parse_read_options
from tidings.spark.planning import DataLossError, ReadError
from tidings.spark.pushdown import narrow
from tidings.spark.reading import read_range
from tidings.spark.source import TidingsPushdownReader, TidingsReader


@dataclass
class FakeOverlay:
    brokers: dict[str, FakeBroker]
    down: set[str] = field(default_factory=set)
    advice: dict[str, str] = field(default_factory=dict)  # address -> where route advice moves a client
    reads: list[tuple[str, str, int, int]] = field(default_factory=list)  # (address, pattern, after, end)
    open_clients: int = 0


OVERLAY: dict[str, FakeOverlay] = {}


class FakeClient(BulkReads):
    def __init__(self, overlay_: FakeOverlay, broker: FakeBroker) -> None:
        self.overlay, self.broker, self.pubend = overlay_, broker, broker.pubend
        overlay_.open_clients += 1

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.overlay.open_clients -= 1

    def status(self) -> dict[str, Any]:
        b = self.broker
        ticks = [e.tick for e in b.events if e.tick > b.released_through]
        return {"pubend": b.pubend, "first_tick": min(ticks, default=None),
                "last_tick": max([e.tick for e in b.events], default=0), "released_through": b.released_through,
                "overlay": {"address": b.address, "leaf_set": [["id", a] for a in b.leaf_set]}}


    def read(self, pattern: str, *, filter: str | None = None, after: int = 0, end: int | None = None,
             on_gap: str = "raise") -> Iterator[Event]:
        assert end is not None
        self.overlay.reads.append((self.broker.address, pattern, after, end))
        yield from (e for e in self.broker.events if after < e.tick <= end and pattern_matches(pattern, e.channel))


def connect_following_advice(opts: Any, address: str, instance: str) -> FakeClient:
    """What a connection with follow_advice=True does: it may end up at another broker."""
    now = OVERLAY["now"]
    if address in now.down:
        raise ConnectionRefusedError(f"{address} is down")
    return FakeClient(now, now.brokers[now.advice.get(address, address)])


def make_overlay() -> FakeOverlay:
    # a ring of three brokers; the one the read names knows only its right-hand neighbour
    brokers = {
        "b1:1": FakeBroker("p1", "b1:1", ["b2:1"]),
        "b2:1": FakeBroker("p2", "b2:1", ["b3:1", "b1:1"]),
        "b3:1": FakeBroker("p3", "b3:1", ["b1:1"]),
    }
    for i, broker in enumerate(brokers.values()):
        broker.events = [Event(broker.pubend, 1000 + 3 * k + i, f"load/h{k % 3}", {"k": k}, "t", "p", b"")
                         for k in range(40)]
    return FakeOverlay(brokers)


@pytest.fixture
def fake() -> Iterator[FakeOverlay]:
    OVERLAY["now"] = make_overlay()
    yield OVERLAY["now"]
    OVERLAY.clear()


def reader(cls: type[TidingsReader] = TidingsReader, **options: str) -> TidingsReader:
    opts = parse_read_options({"broker": "b1:1", "pattern": "load/#", "partitions": "4", **options})
    return cls(opts, EVENT_SCHEMA, connect_following_advice)


def rows_of(r: TidingsReader) -> list[tuple[str, int, str]]:
    rows = []
    for part in r.partitions():
        for batch in r.read(pickle.loads(pickle.dumps(part))):
            rows += zip(batch.column("pubend").to_pylist(), batch.column("tick").to_pylist(),
                        batch.column("channel").to_pylist(), strict=True)
    return rows


def every(fake: FakeOverlay, lo: int = 0, hi: int = 2**63 - 1) -> list[tuple[str, int, str]]:
    return sorted((e.pubend, e.tick, e.channel) for b in fake.brokers.values() for e in b.events if lo <= e.tick <= hi)


def test_a_read_through_one_broker_returns_every_pubend_once(fake: FakeOverlay) -> None:
    r = reader()
    parts = r.partitions()
    assert {p.pubend for p in parts} == {"p1", "p2", "p3"} and len(parts) == 3  # 4 partitions, 1 each
    assert all(fake.brokers[p.address].pubend == p.pubend for p in parts)
    assert sorted(rows_of(r)) == every(fake)


def test_tick_bounds_apply_to_every_pubend_as_a_vector(fake: FakeOverlay) -> None:
    fake.brokers["b3:1"].events = fake.brokers["b3:1"].events[:20]  # its tail is below endTick
    rows = rows_of(reader(startTick="1030", endTick="1080", partitions="7"))
    assert sorted(rows) == every(fake, 1030, 1080)
    assert max(t for p, t, _ in rows if p == "p3") == fake.brokers["b3:1"].events[-1].tick


def test_route_advice_cannot_move_a_task_to_another_pubend(fake: FakeOverlay, monkeypatch: pytest.MonkeyPatch) -> None:
    r = reader()
    parts = r.partitions()
    fake.advice["b2:1"] = "b3:1"  # from now on, a client sent to b2 is moved to b3
    part = next(p for p in parts if p.pubend == "p2")
    with pytest.raises(ReadError, match="b2:1 now logs pubend p3, not p2"):
        list(r.read(part))
    # and the real connections never follow advice
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(sync, "connect", lambda address, **kw: seen.append(kw))
    overlay.connect(r.opts, "b2:1", "read-0")
    assert seen == [{"service": "spark", "instance": "read-0", "credential": None, "tls": False,
                     "follow_advice": False}]


def test_start_tick_zero_on_a_log_that_never_released_anything(fake: FakeOverlay) -> None:
    assert all(b.released_through == 0 for b in fake.brokers.values())
    assert sorted(rows_of(reader(startTick="0"))) == every(fake)


def test_released_ticks_of_one_pubend_fail_or_are_skipped(fake: FakeOverlay, caplog: pytest.LogCaptureFixture) -> None:
    fake.brokers["b2:1"].released_through = 1050
    with pytest.raises(DataLossError, match="events of pubend p2 after tick 999 up to tick 1050"):
        reader(startTick="1000").partitions()
    with caplog.at_level(logging.WARNING, logger="tidings.spark"):
        rows = rows_of(reader(startTick="1000", failOnDataLoss="false"))
    assert sorted(rows) == [r for r in every(fake) if r[0] != "p2" or r[1] > 1050]
    assert "skipping ticks (999, 1050] of pubend p2" in caplog.text


def test_a_broker_that_is_down_fails_the_read_unless_told_to_skip(
    fake: FakeOverlay, caplog: pytest.LogCaptureFixture,
) -> None:
    fake.down.add("b2:1")
    fake.brokers["b1:1"].leaf_set.append("b3:1")
    with pytest.raises(ReadError, match="broker b2:1 of the overlay is not reachable"):
        reader().partitions()
    with caplog.at_level(logging.WARNING, logger="tidings.spark"):
        rows = rows_of(reader(failOnDataLoss="false"))
    assert sorted(rows) == [r for r in every(fake) if r[0] != "p2"]
    assert "the events its pubend logged are left out" in caplog.text


# ---- stopping early ---------------------------------------------------------------------------------

def test_a_task_stopped_early_closes_everything_in_order(fake: FakeOverlay) -> None:
    opts = parse_read_options({"broker": "b1:1", "pattern": "#"})
    left: list[int] = []
    batches = read_range(opts, connect_following_advice, "b1:1", "read-0", "p1", 0, 2000, arrow_schema(),
                         leave=lambda: left.append(fake.open_clients))
    next(batches)
    batches.close()  # show(): Spark stops reading
    assert fake.open_clients == 0 and left == []
    batches = read_range(opts, connect_following_advice, "b1:1", "read-0", "p1", 0, 2000, arrow_schema(),
                         leave=lambda: left.append(fake.open_clients))
    next(batches)
    try:
        raise BrokenPipeError(32, "Broken pipe")  # Spark dropped the worker's output socket
    except BrokenPipeError:
        batches.close()
    assert left == [0]  # the worker leaves only once its connection is closed


def test_limit_on_a_real_broker_leaves_no_noise(tmp_path: Any, capfd: pytest.CaptureFixture[str],
                                               caplog: pytest.LogCaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from tidings.testing import BrokerProcess

    unraisable: list[str] = []  # "Exception ignored in ...": what a worker prints to stderr
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}"))
    with BrokerProcess(tmp_path / "b") as broker:
        with sync.connect(broker.address, service="t", instance="p") as client:
            ticks = [r.tick for r in client.publish_many([("load/h1", b"x" * 200)] * 9000)]  # frames of 1 MiB
        opts = parse_read_options({"broker": broker.address, "pattern": "#"})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for abandon in (False, True):
                batches = read_range(opts, overlay.connect, broker.address, "read-0", client.pubend or "",
                                     0, ticks[-1], arrow_schema())
                assert 5 < next(batches).num_rows < len(ticks)  # more than limit(5) needs; the rest is never read
                if abandon:
                    del batches  # what a Python worker does with a generator it dropped
                    gc.collect()
                else:
                    batches.close()
        gc.collect()
    assert unraisable == []
    _out, err = capfd.readouterr()
    assert "Traceback" not in err and "never awaited" not in err and "Event loop is closed" not in err, err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ---- pushdown --------------------------------------------------------------------------------------

def test_pushed_predicates_narrow_the_read_and_the_rest_go_back_to_spark() -> None:
    filters = [GreaterThan(("tick",), 1010), LessThanOrEqual(("tick",), 1050), EqualTo(("channel",), "load/h1"),
               In(("pubend",), ("p1", "p3")), IsNotNull(("payload",)), StringStartsWith(("channel",), "load/"),
               EqualTo(("source_service",), "t")]
    narrowing, remaining = narrow(filters, "load/#")
    assert (narrowing.start_tick, narrowing.end_tick, narrowing.channel) == (1011, 1050, "load/h1")
    assert narrowing.pubends == frozenset({"p1", "p3"}) and not narrowing.empty
    assert remaining == filters[5:] and all(a is b for a, b in zip(remaining, filters[5:], strict=True))
    assert narrow([EqualTo(("channel",), "sys/x")], "load/#")[0].empty
    assert narrow([GreaterThan(("tick",), 9), LessThanOrEqual(("tick",), 9)], "#")[0].empty


def test_a_pushdown_reader_reads_only_what_the_predicates_leave(fake: FakeOverlay) -> None:
    r = reader(TidingsPushdownReader)
    assert not list(r.pushFilters([EqualTo(("channel",), "load/h1"), In(("pubend",), ("p1", "p3")),
                                   GreaterThan(("tick",), 1010)]))
    rows = rows_of(r)
    assert sorted(rows) == [x for x in every(fake, 1011) if x[2] == "load/h1" and x[0] in ("p1", "p3")]
    assert {pattern for _, pattern, _, _ in fake.reads} == {"load/h1"}
    assert {address for address, _, _, _ in fake.reads} == {"b1:1", "b3:1"}


# ---- the workers' Python ----------------------------------------------------------------------------

def test_workers_without_tidings_get_this_interpreter_for_the_data_source(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    class FakeContext:
        master = "local[2]"
        pythonExec = str(tmp_path / "no-such-python")
        environment: dict[str, str] = {"PYTHONHASHSEED": "0"}
        conf: dict[str, str] = {}

        def getConf(self) -> dict[str, str]:
            return self.conf

    class FakeSpark:
        sparkContext = FakeContext()

    sc = FakeSpark.sparkContext
    seen = []
    with workers.worker_python(FakeSpark()):
        seen.append((sc.pythonExec, dict(sc.environment)))
    assert seen[0][0] == sys.executable  # it imports tidings through the PYTHONPATH it already has
    monkeypatch.setattr(workers, "imports_tidings", lambda python, path: False)
    with workers.worker_python(FakeSpark()):
        seen.append((sc.pythonExec, dict(sc.environment)))
    assert seen[1][0] == sys.executable and workers.tidings_path() in seen[1][1]["PYTHONPATH"]
    assert sc.pythonExec.endswith("no-such-python") and sc.environment == {"PYTHONHASHSEED": "0"}
    monkeypatch.undo()
    # a cluster: spark.pyspark.python (as workers.configure sets it) is what the data source runs,
    # although PySpark's context took PYSPARK_PYTHON's (or python3) for a job not run by spark-submit
    sc.master, sc.conf["spark.pyspark.python"] = "spark://127.0.0.1:7077", "/opt/py/bin/python"
    with workers.worker_python(FakeSpark()):
        seen.append((sc.pythonExec, dict(sc.environment)))
    assert seen[2] == ("/opt/py/bin/python", {"PYTHONHASHSEED": "0"})
    assert sc.pythonExec.endswith("no-such-python")
    assert workers.imports_tidings(sys.executable, workers.tidings_path())
    settings = workers.session_settings()
    assert settings["spark.pyspark.python"] == sys.executable
    assert workers.tidings_path() in settings["spark.executorEnv.PYTHONPATH"]


def test_an_interpreter_that_imports_tidings_but_not_its_dependencies_is_not_taken(tmp_path: Any) -> None:
    """A job run as `.venv/bin/python job.py` with PYTHONPATH=src: the system python3 imports
    `tidings` from the source tree, but not msgpack or pyarrow; its workers would fail."""
    bare = tmp_path / "bare-python"  # this interpreter without its site-packages
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    plain = subprocess.run([str(bare), "-c", "import tidings"], env={"PYTHONPATH": workers.tidings_path()},
                           capture_output=True, check=False)
    assert plain.returncode == 0, plain.stderr
    assert not workers.imports_tidings(str(bare), workers.tidings_path())
