"""bench/path_trace.py: one event and one nack through the simulated overlay, module changes per broker.

It runs once in process and once as the command (`--json`, another hash seed): the same figures
both times; the event went publisher -> PHB -> RP -> F -> SHB -> subscriber with the roles it
claims; the nack went from the SHB's timer to the answer at the SHB; every count is positive and
the views nest (folded <= core <= all).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import path_trace  # noqa: E402


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return path_trace.trace(seed=1, brokers=16)


def test_the_event_goes_through_the_roles_it_claims(result: dict[str, Any]) -> None:
    roles = result["roles"]
    assert len(set(roles.values())) == 4, roles  # PHB, RP, F and SHB are four brokers
    stops = result["event"]["stops"]
    assert stops[0]["role"] == "publisher" and stops[-1]["role"] == "subscriber"
    brokers = [s["role"] for s in stops[1:-1]]
    assert [r for r in brokers if r != "hop"] == ["PHB", "RP", "F", "SHB"], brokers
    assert [s["node"] for s in stops if s["role"] in roles] == [roles[r] for r in ("PHB", "RP", "F", "SHB")]
    assert any("Synced" in i for i in stops[1]["inputs"])  # the PHB sent the event on once it was durable


def test_the_nack_goes_from_the_shbs_timer_to_the_answer(result: dict[str, Any]) -> None:
    stops = result["nack"]["stops"]
    assert stops[0]["role"] == "SHB" and len(stops[0]["inputs"]) == 1 and "Timer" in stops[0]["inputs"][0]
    assert stops[-1]["role"] == "SHB" and stops[-1]["inputs"][-1] == stops[1]["inputs"][0]  # bytes from a peer
    assert len(stops) >= 3  # someone upstream answered


def test_the_counts_are_positive_and_nest(result: dict[str, Any]) -> None:
    for key in ("event", "nack"):
        fig = result[key]
        for stop in fig["stops"]:
            assert 0 <= stop["changes_folded_handle"] <= stop["changes_folded"] <= stop["changes_core"], stop
            assert stop["changes_core"] <= stop["changes_all"], stop
            assert set(stop["files_folded"]) <= set(stop["files_core"]) <= set(stop["files_all"]), stop
            assert stop["files_core"], stop
            for view in ("all", "core", "folded"):
                assert set(stop[f"files_{view}"]) <= set(fig[f"files_{view}"])
            assert all(not f.startswith(("/", "..")) and f.endswith(".py") for f in stop["files_all"])
            if stop["role"] not in ("publisher", "subscriber"):
                assert stop["changes_folded_handle"] > 0, stop
        assert set(fig["files_folded"]) <= set(fig["files_core"]) <= set(fig["files_all"])
        assert all(f.startswith(path_trace.CORE) for f in fig["files_core"])


def test_same_seed_same_figures_in_another_process() -> None:
    """Two fresh processes with other hash seeds print the same figures. (Fresh processes, not this
    one: a run in a process where other tests already warmed the core's caches takes other walks.)"""
    src = str(Path(path_trace.tidings.__file__).resolve().parents[1])  # the tidings this test imports

    def figures(hash_seed: str) -> Any:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed,
               "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, str(BENCH / "path_trace.py"), "--json", "--seed", "1", "--brokers", "16"],
                             capture_output=True, text=True, env=env, timeout=120, check=True).stdout
        lines = out.splitlines()
        assert len(lines) == 1
        return json.loads(lines[0])

    first = figures("7")
    assert first == figures("11")
    assert first["event"]["stops"][1]["role"] == "PHB" and first["event"]["stops"][1]["changes_folded_handle"] > 0


def test_the_table_names_each_stop(result: dict[str, Any]) -> None:
    text = path_trace.table(result)
    for role in ("publisher", "PHB", "RP", "F", "SHB", "subscriber"):
        assert f"  {role} " in text
    assert "whole path:" in text
    every = path_trace.table(result, walks="all")  # the walks with the runtime's files
    assert "sim/" in every.split("walks (every file)")[1] and "core/" in every


def test_a_nack_at_the_rp_is_answered_from_the_phbs_log() -> None:
    result = path_trace.trace(seed=1, brokers=16, drop_at="RP")
    stops = result["nack"]["stops"]
    assert [s["role"] for s in stops] == ["RP", "PHB", "RP", "F", "SHB"]
    assert "Timer" in stops[0]["inputs"][0]
    assert len(stops[1]["inputs"]) == 2  # the nack's bytes, then the log's answer to the read it asked for
    # the event's path is the same brokers in the same roles (its counts may differ in this process:
    # caches that earlier runs warmed take shorter walks; test_same_seed_same_figures_in_another_process
    # holds the counts)
    plain = path_trace.trace(seed=1, brokers=16)
    assert [(s["role"], s["node"]) for s in result["event"]["stops"]] == \
        [(s["role"], s["node"]) for s in plain["event"]["stops"]]
