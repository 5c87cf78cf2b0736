"""The simulator's durable subscriber fails over as the client library does: the same roaming
machine (core/session/roaming.py) rotates over its failover brokers when its broker is killed, and
the overlay-wide checker finds nothing lost, repeated or out of order. A sweep over seeds that also
draw loss, duplication, reordering, clock skew, partitions and other kills (sweep_scenario):
20 seeds in `make test`, 200 in `make soak`."""

import pytest

from tidings.sim.delivery_scenario import DeliveryRun, failover_scenario

SEEDS = 20
SOAK_SEEDS = 200


def failed_over_cleanly(seed: int) -> None:
    run = DeliveryRun(failover_scenario(seed))
    result = run.execute()
    assert result.problems == [], (seed, result.faults_done, result.problems[:5])
    (durable,) = [sub for sub in run.subscribers if sub.durable]
    if any(f.startswith("durable-home: b") for f in result.faults_done):
        assert durable.failovers >= 1, (seed, result.faults_done)
    assert durable.received


@pytest.mark.parametrize("seed", range(SEEDS))
def test_failover_sweep(seed):
    failed_over_cleanly(seed)


@pytest.mark.soak
def test_failover_soak():
    for seed in range(SEEDS, SEEDS + SOAK_SEEDS):
        failed_over_cleanly(seed)
