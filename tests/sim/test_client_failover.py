"""The simulator's durable subscriber roams as the client library does, with the same roaming
machine (core/session/roaming.py): it rotates over its failover brokers when its broker is killed,
and follows draining advice (probing the candidates) when its broker is drained and then stopped;
the overlay-wide checker finds nothing lost, repeated or out of order. A sweep over seeds that also
draw loss, duplication, reordering, clock skew, partitions, other kills and the subscriber's own
moves with its token (sweep_scenario): 10 seeds in `make test` (kills and drains, 5 each), 210 more
in `make soak`."""

import pytest

from tidings.sim.delivery_scenario import DeliveryRun, failover_scenario

SEEDS = 10
SOAK_SEEDS = 210


def failed_over_cleanly(seed: int) -> None:
    run = DeliveryRun(failover_scenario(seed))
    result = run.execute()
    assert result.problems == [], (seed, result.faults_done, result.problems[:5])
    (durable,) = [sub for sub in run.subscribers if sub.durable]
    if any(f.startswith("durable-home: b") for f in result.faults_done):
        assert durable.failovers >= 1, (seed, result.faults_done)
    if any(f.startswith("durable-drain: b") for f in result.faults_done):  # it moved on the advice, or failed over
        assert durable.advice_moves + durable.failovers >= 1, (seed, result.faults_done)
    assert durable.received


@pytest.mark.parametrize("seed", range(SEEDS))
def test_failover_sweep(seed):
    failed_over_cleanly(seed)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(SEEDS, SEEDS + SOAK_SEEDS))
def test_failover_soak(seed):
    failed_over_cleanly(seed)
