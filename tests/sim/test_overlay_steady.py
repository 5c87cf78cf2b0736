"""The steady-state construction routes like an overlay built by real joins: over the same lookups
(same brokers, same ids, same sources and keys), the hop distributions agree within 2 percentage
points per bucket. CI runs it at 1,000 brokers; TIDINGS_SIM_LARGE=1 adds the 5,000-broker run that
docs/experiments.md quotes (a few minutes: 5,000 real joins)."""

from __future__ import annotations

import os

import pytest

from tidings.core.overlay.node import OverlayConfig
from tidings.sim.overlay.build import install_steady, join_all
from tidings.sim.overlay.lookups import LookupResult, LookupRun, lookup_members
from tidings.sim.overlay.sim import OverlaySim, leaf_set_errors

CONFIG = OverlayConfig()
SIZES = [1000, 5000] if os.environ.get("TIDINGS_SIM_LARGE") else [1000]


def route(n: int, build: str, lookups: int) -> LookupResult:
    sim = OverlaySim(n, 17, lookup_members(CONFIG))
    if build == "joins":
        assert join_all(sim, sim.world.derive_rng("build"))
    else:
        install_steady(sim, CONFIG, sim.world.derive_rng("build"))
    assert leaf_set_errors(sim) == []
    return LookupRun(sim, lookups, sim.world.derive_rng("lookups")).run()


@pytest.mark.parametrize("n", SIZES)
def test_steady_state_and_real_joins_give_the_same_hop_distribution(n: int):
    lookups = 4 * n
    joined, steady = route(n, "joins", lookups), route(n, "steady", lookups)
    for result in (joined, steady):
        assert (result.delivered, result.wrong) == (lookups, 0)
    a, b = joined.percentages(), steady.percentages()
    for hops in set(a) | set(b):
        assert abs(a.get(hops, 0.0) - b.get(hops, 0.0)) <= 2.0, (hops, a, b)
    assert abs(joined.mean_hops - steady.mean_hops) < 0.05
