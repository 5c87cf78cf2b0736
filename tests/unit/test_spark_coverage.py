"""Which pubends a read cannot cover (spark/coverage.py), and the survey of an overlay whose pubend
directory lists a pubend its walk cannot reach (spark/overlay.py), against fake brokers."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.spark_overlay_fake import FakeBroker
from tidings.spark import coverage
from tidings.spark.overlay import Missing, survey
from tidings.spark.planning import ReadError

ticks = st.integers(0, 10_000)


@given(ticks, st.none() | ticks, ticks, ticks, ticks, st.booleans())
def test_unread_is_exactly_the_known_events_in_the_range(after: int, end: int | None, first: int, span: int,
                                                        released: int, empty: bool) -> None:
    """Against a reference: the ticks of (after, end] from the oldest retained event to the newest."""
    first += 1  # a retained tick is above the released prefix, and ticks are positive
    last = first + span
    m = Missing("p", "h:1", "down", last + 5, last, None if empty else first, min(released, first - 1), 7)
    got = coverage.unread(m, after, end)
    known = [] if empty else [t for t in range(first, last + 1) if t > after and (end is None or t <= end)]
    if not known:
        assert got is None
    else:
        assert got is not None and (got.after, got.through) == (known[0] - 1, known[-1])
        assert (got.pubend, got.address, got.records) == ("p", "h:1", 7)


def test_check_fails_naming_each_pubend_and_address_or_warns_once_each(caplog: pytest.LogCaptureFixture) -> None:
    found = [coverage.Unread("pA", "10.0.0.1:7400", "not reachable", 5, 9, 3),
             coverage.Unread("pB", "10.0.0.2:7400", "not reachable", 1, 2, 1)]
    with pytest.raises(coverage.PubendUnreachableError,
                       match=r"2 pubend\(s\).*pubend pA at 10.0.0.1:7400.*pubend pB at 10.0.0.2:7400.*failOnDataLoss"):
        coverage.check("read of 'a/#'", found, fail_on_data_loss=True)
    assert coverage.check("read of 'a/#'", [], fail_on_data_loss=True) == []
    with caplog.at_level(logging.WARNING, logger="tidings.spark"):
        assert coverage.check("read of 'a/#'", found, fail_on_data_loss=False) == found
    assert [r.getMessage().count("pubend p") for r in caplog.records] == [1, 1]
    assert "2 of 2 pubend(s) skipped" in caplog.records[1].getMessage()
    assert coverage.metrics(found)["pubendsSkipped"] == 2
    assert coverage.metrics(found)["skipped"]["pA"] == {"address": "10.0.0.1:7400", "after": 5, "through": 9,
                                                        "records": 3, "why": "not reachable"}


class Client:
    def __init__(self, broker: FakeBroker, directory: list[dict[str, Any]]) -> None:
        self.broker, self.directory = broker, directory

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def status(self) -> dict[str, Any]:
        b = self.broker
        return {"pubend": b.pubend, "first_tick": None, "last_tick": 50, "released_through": 0,
                "overlay": {"address": b.address, "leaf_set": [["id", a] for a in b.leaf_set]},
                "directory": self.directory}


class Opts:
    broker, credential, tls_ca = "b1:1", None, None


def entry(pubend: str, address: str, version: int = 1, **fields: Any) -> dict[str, Any]:
    return {"pubend": pubend, "address": address, "tail": 50, "last_event_tick": 40, "first_tick": 10,
            "released_through": 0, "records": 30, "version": version, **fields}


def test_survey_names_a_listed_pubend_whose_broker_no_leaf_set_holds_any_more() -> None:
    brokers = {"b1:1": FakeBroker("p1", "b1:1", ["b2:1"]), "b2:1": FakeBroker("p2", "b2:1", ["b1:1"]),
               "b4:1": FakeBroker("p9", "b4:1", [])}  # b4 now logs another pubend than the directory says
    directory = [entry("p1", "b1:1"), entry("p2", "b2:1"), entry("p3", "b3:1"), entry("p4", "b4:1")]

    def connect(opts: Any, address: str, instance: str) -> Client:
        if address not in brokers:
            raise ConnectionRefusedError(f"{address} refused")
        return Client(brokers[address], directory)

    found = survey(Opts(), connect)
    assert sorted(found.heads) == ["p1", "p2", "p9"]
    assert sorted(found.missing) == ["p3", "p4"]
    assert found.missing["p3"].address == "b3:1" and "not reachable" in found.missing["p3"].why
    assert found.missing["p4"].why == "gone: the broker there now logs pubend p9"
    assert (found.missing["p3"].last_event_tick, found.missing["p3"].records) == (40, 30)


def test_survey_takes_the_newest_entry_any_broker_holds_and_refuses_a_malformed_one() -> None:
    brokers = {"b1:1": FakeBroker("p1", "b1:1", ["b2:1"]), "b2:1": FakeBroker("p2", "b2:1", [])}
    held = {"b1:1": [entry("p3", "b3:1", version=1)], "b2:1": [entry("p3", "b5:1", version=2)]}

    def connect(opts: Any, address: str, instance: str) -> Client:
        if address not in brokers:
            raise ConnectionRefusedError(f"{address} refused")
        return Client(brokers[address], held[address])

    assert survey(Opts(), connect).missing["p3"].address == "b5:1"
    held["b2:1"] = [entry("p3", "b5:1", version=-1)]
    with pytest.raises(ReadError, match="malformed pubend directory entry"):
        survey(Opts(), connect)
