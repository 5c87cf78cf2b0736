"""The Pastry experiments of the paper, as one reusable run: build, route, fail, route, repair, route.

Theory of operation. `PastryExperiment` builds an overlay of `nodes` brokers (real joins or the
steady state), then runs up to three phases of `lookups` each (lookups.py says what is counted):

- `before`: the overlay as built;
- `right_after`: `fail` random brokers have just failed silently (frozen: they answer nothing);
  the lookups start at once, so they meet the stale leaf sets and routing tables, and each attempt
  on a dead node costs a detection (the runtime's unanswered-message timeout) and a re-route;
- `after_repair`: virtual time has run `settle_ns` past the failures, long enough for keep-alives
  to declare the dead leaves failed, leaf sets to be repaired, and the routing-table rows that met
  a dead entry (in the previous phase, or in a periodic refresh) to be asked again.

The paper's figures (Rowstron and Druschel's Pastry, b = 4, leaf set 16, hosts on a plane) are kept
here beside ours so the command and the docs print them side by side. Everything random comes from
streams derived from the seed (topology, build, lookups, failures), so one seed is one run; the
experiment never reads a clock (the command measures wall time around it).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidings.core.overlay.node import OverlayConfig
from tidings.core.units import SECOND_NS
from tidings.sim.overlay.build import install_steady, join_all
from tidings.sim.overlay.lookups import LookupRun, lookup_members
from tidings.sim.overlay.sim import OverlaySim, leaf_set_errors

PAPER_HOPS_100K: dict[str, Any] = {"mean": 3.98, "max": 5, "percent": {1: 0.06, 2: 1.56, 3: 16.43, 4: 64.49, 5: 17.45}}
PAPER_FAILURES_5K = {"nodes": 5000, "failed": 500, "before": 2.73, "right_after": 2.96, "after_repair": 2.74}

Progress = Callable[[str, int, int], None]


@dataclass
class PastryExperiment:
    nodes: int
    seed: int
    lookups: int = 200_000
    model: str = "plane"
    build: str = "steady"
    fail: int = 0
    settle_ns: int = 30 * SECOND_NS
    window_ns: int = SECOND_NS
    sample_max: int = 16
    loss_probability: float = 0.0
    config: OverlayConfig = field(default_factory=OverlayConfig)

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ValueError("--nodes must be at least 2")
        if self.build not in ("steady", "joins"):
            raise ValueError("--build is steady or joins")
        if not 0 <= self.fail < self.nodes - 1:
            raise ValueError("--fail must leave at least two brokers alive")
        if self.lookups < 1:
            raise ValueError("--lookups must be at least 1")

    def make_sim(self) -> OverlaySim:
        return OverlaySim(self.nodes, self.seed, lookup_members(self.config),
                          model=self.model, loss_probability=self.loss_probability)

    def run(self, progress: Progress | None = None) -> dict[str, Any]:
        sim = self.make_sim()
        world = sim.world
        report: dict[str, Any] = {"nodes": self.nodes, "seed": self.seed, "model": self.model,
                                  "build": self.build, "lookups_per_phase": self.lookups}
        step = _phase_progress(progress)
        if self.build == "joins":
            if not join_all(sim, world.derive_rng("build"), progress=step("build")):
                missing = sim.n - sum(sim.joined)
                raise RuntimeError(f"{missing} of {sim.n} joins did not complete (see docs/experiments.md)")
        else:
            install_steady(sim, self.config, world.derive_rng("build"), self.sample_max, progress=step("build"))
        report["leaf_sets_wrong_after_build"] = len(leaf_set_errors(sim))
        phases: dict[str, Any] = {}
        lookups_rng = world.derive_rng("lookups")
        phases["before"] = self._phase(sim, lookups_rng, step("before"))
        if self.fail:
            failures_rng = world.derive_rng("failures")
            failed_at = world.now
            for host in failures_rng.sample(sim.live(), self.fail):
                sim.fail_silently(host)
            phases["right_after"] = self._phase(sim, lookups_rng, step("right_after"))
            world.run(until_ns=max(world.now, failed_at + self.settle_ns))
            report["leaf_sets_wrong_after_repair"] = len(leaf_set_errors(sim))
            phases["after_repair"] = self._phase(sim, lookups_rng, step("after_repair"))
        report["phases"] = phases
        report["virtual_s"] = round(world.now / SECOND_NS, 3)
        report["messages"] = sim.net.messages_sent
        report["trace_digest"] = world.trace_digest()
        return report

    def _phase(self, sim: OverlaySim, rng: random.Random,
               progress: Callable[[int, int], None] | None) -> dict[str, Any]:
        return LookupRun(sim, self.lookups, rng, self.window_ns, progress).run().summary()


def _phase_progress(progress: Progress | None) -> Callable[[str], Callable[[int, int], None] | None]:
    def make(phase: str) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        return lambda done, total: progress(phase, done, total)

    return make
