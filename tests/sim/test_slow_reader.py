"""A slow subscriber: it falls behind (SendBlocked), reads the log back, and still gets every event
exactly once -- while the broker keeps a bounded queue for it (STYLE.md habit 7)."""

from __future__ import annotations

import pytest

from tidings.core.units import MILLISECOND_NS
from tidings.sim.scenario import SIM_BROKER_CONFIG, PublisherSpec, Scenario, Simulation, SubscriberSpec

RECORD_BYTES_MAX = 200  # an encoded event of the simulated workload is about 90 bytes


def slow_reader(seed: int, steady_events: int = 800) -> Scenario:
    """A burst fills the log past one log read; a slow reader subscribes from the start (so it
    catches up through reads and its connection blocks), then a steady publisher keeps going."""
    return Scenario(
        seed=seed, crashes=0, client_drops=0, mute_clients=0,
        publishers=(
            PublisherSpec("burst", 150, interval_ns=(100_000, 300_000)),
            PublisherSpec("steady", steady_events, interval_ns=(1 * MILLISECOND_NS, 2 * MILLISECOND_NS),
                          start_at_ns=80 * MILLISECOND_NS, window=1, batch_max=6),
        ),
        subscribers=(
            SubscriberSpec("slow", "#", start="start", join_at_ns=60 * MILLISECOND_NS,
                           read_rate_bytes_per_s=5_000),
            SubscriberSpec("fast", "#"),
        ),
    )


def queue_bound(scenario: Scenario) -> int:
    """The most a blocked connection may hold: the high-water mark, the read answer that crossed it
    plus the read already in flight, and one sync's fan-out."""
    cfg = scenario.config
    fan_out = max(p.window * p.batch_max for p in scenario.publishers) * RECORD_BYTES_MAX
    return cfg.send_queue_bytes_max + 2 * (cfg.log_read_bytes_max + RECORD_BYTES_MAX) + fan_out


@pytest.mark.parametrize("seed", range(3))
def test_a_slow_reader_falls_behind_reads_the_log_and_misses_nothing(seed):
    sim = Simulation(slow_reader(seed, steady_events=200)).run()
    assert sim.check() == [], sim.report()
    assert sim.node.stats["SendBlocked"] >= 1 and sim.node.stats["ReadLog"] >= 2
    assert len(sim.subscribers[0].received) == sim.disk.durable_count


@pytest.mark.parametrize("seed", range(3))
def test_the_broker_queues_a_bounded_amount_for_a_slow_reader(seed):
    scenario = slow_reader(seed)
    assert SIM_BROKER_CONFIG.send_queue_bytes_max == scenario.config.send_queue_bytes_max
    sim = Simulation(scenario).run()
    assert sim.check() == [], sim.report()
    peak = sim.send_queue_bytes_peak()
    assert peak <= queue_bound(scenario), f"seed {seed}: {peak} bytes queued to one connection"
