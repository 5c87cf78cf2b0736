"""The simulator's durable subscriber and two plain ones roam as the client library does, with the
same roaming machine (core/session/roaming.py) and cursor (core/session/cursor.py): they rotate over
their failover brokers when their broker is killed, and follow draining advice (probing the
candidates, dialling the chosen broker before they leave the old one) when their broker is drained
and then stopped; the overlay-wide checker finds nothing lost, repeated or out of order, the plain
ones' included across their moves. The second plain one reads slower than its events come, so
its broker holds some back when it moves: with the former start from "now" after a move, 4 of seeds
0-7 missed 2 to 21 events. A sweep over seeds that also
draw loss, duplication, reordering, clock skew, partitions, other kills and the subscriber's own
moves with its token (sweep_scenario): 20 seeds in `make test`, 200 in `make soak`."""

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
    if any(f.startswith("durable-drain: b") for f in result.faults_done):  # it moved on the advice, or failed over
        assert durable.advice_moves + durable.failovers >= 1, (seed, result.faults_done)
    assert durable.received
    roamers = [sub for sub in run.subscribers if sub.roams]
    assert len(roamers) == 2 and all(sub.received for sub in roamers)
    if any(f.startswith(("roamers-home: b", "roamers-drain: b")) for f in result.faults_done):
        assert all(sub.advice_moves + sub.failovers >= 1 for sub in roamers), (seed, result.faults_done)


@pytest.mark.parametrize("seed", range(SEEDS))
def test_failover_sweep(seed):
    failed_over_cleanly(seed)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(SEEDS, SEEDS + SOAK_SEEDS))
def test_failover_soak(seed):
    failed_over_cleanly(seed)
