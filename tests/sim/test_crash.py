"""Broker crashes between write and sync, restarts, reconnections: nothing acknowledged is lost and
every subscriber gets its stream exactly once, in order (see tidings.sim.checker).

Replay a failing seed with `Simulation(<the scenario>(seed)).run().report()`.
"""

from __future__ import annotations

import dataclasses

import pytest

from tidings.core.units import MILLISECOND_NS
from tidings.sim.scenario import SIM_BROKER_CONFIG, PublisherSpec, Scenario, Simulation

SEEDS = range(20)


def default_crashes(seed: int) -> Scenario:
    """Three publishers, five subscribers (live, filtered, late from the start, slow), 3 crashes."""
    return Scenario(seed=seed, crashes=3)


def slow_disk_big_batches(seed: int) -> Scenario:
    """Syncs of 2-25 ms under pipelined big batches: large group commits, much in doubt at each
    crash, tiny output queues and log reads so every subscriber keeps falling behind, and a small
    pending-sync limit so publishers are paused until the disk catches up."""
    publishers = tuple(PublisherSpec(f"pub-{i}", 200, interval_ns=(200_000, 2 * MILLISECOND_NS),
                                     window=8, batch_max=20) for i in range(4))
    config = dataclasses.replace(SIM_BROKER_CONFIG, send_queue_bytes_max=1024, log_read_bytes_max=2048,
                                 pending_sync_bytes_max=2048)
    return Scenario(seed=seed, publishers=publishers, crashes=5, client_drops=5,
                    sync_ns=(2 * MILLISECOND_NS, 25 * MILLISECOND_NS), config=config)


def run_and_check(scenario: Scenario) -> Simulation:
    sim = Simulation(scenario).run()
    problems = sim.check()
    if problems:
        pytest.fail(f"seed {scenario.seed} failed; replay it with this seed\n{sim.report()}", pytrace=False)
    return sim


@pytest.mark.parametrize("seed", SEEDS)
def test_crashes_between_write_and_sync_lose_nothing_acknowledged(seed):
    sim = run_and_check(default_crashes(seed))
    summary = sim.summary()
    # the run really went through the paths it is meant to test
    assert summary["crashes"] == 3 and summary["crashes_during_sync"] >= 1, summary
    assert summary["events_acked"] > 250 and summary["events_rejected"] >= 1, summary
    assert summary["send_blocked"] >= 1 and summary["log_reads"] >= 1, summary
    assert sim.node.stats.get("TimerFired", 0) >= 1, "the mute client's handshake timer never fired"


@pytest.mark.parametrize("seed", range(10))
def test_slow_disk_big_group_commits_and_many_crashes(seed):
    sim = run_and_check(slow_disk_big_batches(seed))
    summary = sim.summary()
    assert summary["crashes"] == 5 and summary["unsynced_lost"] + summary["unsynced_survived"] > 0, summary
    assert summary["syncs"] < summary["log_records"], "group commit should cover several batches"
    assert sim.node.stats.get("PauseReading", 0) >= 1, "no publisher was ever paused for the disk"


@pytest.mark.parametrize("seed", range(5))
def test_publishers_paused_for_a_slow_disk_are_resumed_and_lose_nothing(seed):
    """Without crashes or drops every pause ends and every event is acknowledged: no deadlock."""
    base = slow_disk_big_batches(seed)
    sim = run_and_check(dataclasses.replace(base, crashes=0, client_drops=0))
    summary = sim.summary()
    pauses, resumes = sim.node.stats.get("PauseReading", 0), sim.node.stats.get("ResumeReading", 0)
    assert pauses >= 1 and resumes >= 1, (pauses, resumes)
    assert summary["events_in_doubt"] == 0 and summary["events_acked"] + summary["events_rejected"] == 800, summary


def test_the_checker_notices_a_lost_acknowledged_event():
    """The checks are not vacuous: forging one ACK for an event that is not in the log fails (a)."""
    sim = Simulation(default_crashes(0)).run()
    assert sim.check() == []
    sim.publishers[0].acked["pub-0:forged"] = 1
    sim.publishers[0].sent["pub-0:forged"] = ("nodes/h0/load", {}, b"pub-0:forged")
    assert any("pub-0:forged" in p for p in sim.check())


def test_the_checker_notices_a_missing_and_a_duplicated_delivery():
    sim = Simulation(default_crashes(1)).run()
    sub = sim.subscribers[0]
    sub.received.insert(5, sub.received[5])
    del sub.received[20]
    problems = sim.check()
    assert any("twice" in p for p in problems) and any("missed 1 " in p for p in problems)


def idempotent_publishers(seed: int) -> Scenario:
    """Publishers with producer ids that publish again whatever was in doubt at each crash; every
    crash keeps all, some or none of the unsynced tail, so some re-sent events were logged."""
    publishers = tuple(PublisherSpec(f"pub-{i}", 150, interval_ns=(200_000, 2 * MILLISECOND_NS),
                                     window=8, batch_max=10, idempotent=True) for i in range(3))
    return Scenario(seed=seed, publishers=publishers, crashes=4, client_drops=3,
                    sync_ns=(1 * MILLISECOND_NS, 8 * MILLISECOND_NS))


def test_idempotent_retries_after_crashes_log_each_event_once():
    deduplicated = retried = 0
    for seed in range(6):
        sim = run_and_check(idempotent_publishers(seed))  # each ACKed event is in the log once, at its tick
        summary = sim.summary()
        deduplicated += summary["events_deduplicated"]
        retried += summary["unsynced_survived"]
        assert summary["events_in_doubt"] == 0 or not sim.quiesced, summary
    assert deduplicated >= 1 and retried >= 1, "no re-sent event had been logged before its crash"
