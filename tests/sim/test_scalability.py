"""The Figure 4 scalability scenario (src/tidings/sim/scalability.py) in a tiny configuration: the
PHB is the tree's rendez-vous point, durable subscribers that disconnect and resume with their
tokens pass the overlay-wide checker, and the work a CallMeter counts is the same from run to run."""

from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.node_id import closer, node_id_from
from tidings.sim.scalability import TREE, CallMeter, ScalabilityScenario, identities, run_scalability


def test_phb_is_the_rendezvous_point():
    for shbs in (1, 4, 16):
        phb, *others = identities(shbs)
        assert len(others) == shbs
        assert all(closer(tree_key(TREE), node_id_from(phb), node_id_from(o)) for o in others)


def test_tiny_run_counts_work_and_checks_delivery():
    scenario = ScalabilityScenario(seed=3, shbs=1, subscribers_per_shb=2, warm_s=0.3, window_s=0.7,
                                   disconnect_every_s=0.3, away_s=0.1)
    first, again = run_scalability(scenario, CallMeter), run_scalability(scenario, CallMeter)
    assert first.problems == [] and again.problems == []
    assert first.reconnections >= 4 and first.stats["gaps"] == 0
    assert first.acked == 4 * 200 * 1.0 and all(rate > 0 for rate in first.delivered_per_s)
    # the same seed does the same work (to a few calls in a million: warm caches in the second run)
    assert all(abs(a - b) <= 1e-3 * a for a, b in zip(first.work_per_s, again.work_per_s, strict=True))
    assert first.work_per_s[0] > 0
