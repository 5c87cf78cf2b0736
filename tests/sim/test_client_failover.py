"""The simulator's durable subscriber and two plain ones roam as the client library does, with the
same roaming machine (core/session/roaming.py) and cursor (core/session/cursor.py): they rotate over
their failover brokers when their broker is killed, and follow draining advice (probing the
candidates, dialling the chosen broker before they leave the old one) when their broker is drained
and then stopped; the overlay-wide checker finds nothing lost, repeated or out of order, the plain
ones' included across their moves. The second plain one reads slower than its events come, so
its broker holds some back when it moves: with the former start from "now" after a move, 4 of seeds
0-7 missed 2 to 21 events. A sweep over seeds that also draw loss, duplication, reordering, clock
skew, partitions, other kills and the subscriber's own moves with its token (sweep_scenario): 20
seeds in `make test` (kills and drains, 10 each), 200 more in `make soak`."""

from dataclasses import replace

import pytest

from tidings.core.config import BrokerConfig
from tidings.sim.delivery_scenario import CONFIG, DeliveryRun, failover_scenario

SEEDS = 20
SOAK_SEEDS = 200


def failed_over_cleanly(seed: int, config: BrokerConfig = CONFIG) -> None:
    run = DeliveryRun(failover_scenario(seed), config)
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


def test_the_soak_seed_whose_forwarder_let_go_what_it_had_just_fetched():
    """Seed 203 of the soak in every run (about a second): three subscribers fail over to a
    restarted broker from old tokens, and the ticks they lack come through a forwarder with
    complete nacks (docs/delivery.md, "The failover soak's seed 203"). When the broker acknowledged
    again its highest ack from before they came back, the forwarder let go of what it had just
    fetched for it, and 5 events were still on their way when the quiet ended. (Complete nacks
    are on by default; this seed says so, whatever the default.)"""
    failed_over_cleanly(203, replace(CONFIG, nack_complete=True))


def test_a_move_to_a_broker_that_does_not_answer_stays_on_the_old_connection():
    """Dial first: the old connection serves on while the client dials, so a move whose broker
    refuses leaves the subscriber and the publisher where they were, connected and served."""
    from tests.sim.test_runtime_paths import ADDRESS, one_broker
    from tidings.core.units import SECOND_NS
    from tidings.sim.clients import RoamingSubscriber

    world, network, _, publisher = one_broker(3, events=400)
    sub = RoamingSubscriber(world, network, ADDRESS, "roamer", "#", failover=("nowhere:7000",))
    sub.start(world.now)
    assert world.run_until(lambda: sub.subscribed_at is not None and publisher.ready, world.now + 5 * SECOND_NS)
    for client in (sub, publisher):
        assert client.roamer is not None
        client._apply(client.roamer.move_asked("nowhere:7000"))  # the application asks; refused at once
    world.run_until(lambda: publisher.finished, world.now + 30 * SECOND_NS)
    world.run(until_ns=world.now + SECOND_NS)
    assert publisher.finished and sub.connections == 1 and publisher.connections == 1
    assert sub.address == ADDRESS and not sub.downs and sub.roamer is not None and sub.roamer.mode == "serving"
    assert sorted(tick for tick, _ in sub.received) == sorted(publisher.acked.values())
