"""What a streaming query knows of pubends it cannot reach, and what it reports of every pubend.

Theory of operation. A pubend's events can be read only at the broker that logs them. While that
broker is down the query cannot plan or read that pubend's ticks: its offset stays where it is
(nothing is lost; the durable subscription holds those events) and the other pubends' events go on.
What must not happen is silence: the user would see a healthy query at part of the rate.

- **Detection** (`missing_pubends`) is one small function of what the stream sees at a trigger: a
  pubend the query knows (its offset names it, or an earlier trigger of this driver saw it) that no
  broker of the overlay reports now (its broker did not answer, or left the leaf sets, which drop a
  crashed broker within a second). It is the one place to ask a directory of every pubend kept by
  the overlay, where there is one.
- **Tracking** (`OutageWatch`): an outage starts at the first trigger that misses the pubend and
  ends at the first that sees it again; the caller says each start once (a WARN line naming the
  pubend and its broker) and each end once. An outage longer than `maxPubendOutageMs` fails the
  query (`overdue`), when the option is set.
- **Lag** (`lag_report`): per pubend, where its tail is and how much of it the query has not
  covered, for the query's progress (`latestOffset`, the only place PySpark lets a Python source
  report anything: it has no metrics hook). Ticks are microseconds of the pubend's clock, so a
  lag in ticks is a lag in time; events are counted where the driver has seen them.

Pure: no Spark, no broker; `now` (monotonic nanoseconds) is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidings.spark.offsets import Offset
from tidings.spark.overlay import Head


@dataclass(frozen=True, slots=True)
class Outage:
    pubend: str
    address: str | None  # its broker's, when this driver saw it; None after a driver restart
    since_ns: int  # when the query first missed it (monotonic)

    def describe(self) -> str:
        where = f"at {self.address}" if self.address else "(its broker not seen since this driver started)"
        return f"pubend {self.pubend} {where}"


def missing_pubends(known: Mapping[str, str | None], heads: Mapping[str, Head]) -> dict[str, str | None]:
    """The pubends of `known` (pubend -> its broker's address, if known) that no broker reports in
    `heads`, in pubend order."""
    return {p: a for p, a in sorted(known.items()) if p not in heads}


@dataclass
class OutageWatch:
    """The pubends unreachable now, each since the trigger that first missed it."""

    bound_ns: int | None  # maxPubendOutageMs; None: an outage never fails the query
    outages: dict[str, Outage] = field(default_factory=dict)

    def observe(self, now: int, missing: Mapping[str, str | None]) -> tuple[list[Outage], list[tuple[Outage, int]]]:
        """Outages that start now, and those that end now with how long they lasted (ns)."""
        ended = [(o, now - o.since_ns) for p, o in sorted(self.outages.items()) if p not in missing]
        started = [Outage(p, a, now) for p, a in missing.items() if p not in self.outages]
        for outage, _ in ended:
            del self.outages[outage.pubend]
        for outage in started:
            self.outages[outage.pubend] = outage
        for pubend, address in missing.items():  # an address learned since (seen before a restart)
            old = self.outages[pubend]
            if old.address is None and address is not None:
                self.outages[pubend] = Outage(pubend, address, old.since_ns)
        return started, ended

    def overdue(self, now: int) -> Outage | None:
        """The longest outage, if it is longer than the bound."""
        if self.bound_ns is None or not self.outages:
            return None
        oldest = min(self.outages.values(), key=lambda o: (o.since_ns, o.pubend))
        return oldest if now - oldest.since_ns > self.bound_ns else None


def lag_report(end: Offset, seen: Mapping[str, Head], heads: Mapping[str, Head], outages: Mapping[str, Outage],
               clear: Mapping[str, int], behind_events: Mapping[str, int | None], now: int) -> dict[str, Any]:
    """The newest offset the overlay has (every pubend at its tail: the last one seen for a pubend
    that cannot be reached), with, per pubend, what the query at `end` has not covered:

    - `broker`, `reachable`, `tail` (its durable tail, as last seen), `unreachable_ms`;
    - `behind_ticks`: the ticks between the query's position (or the tick up to which the driver
      found nothing matching, `clear`) and the tail; for an unreachable pubend, up to the newest
      tail of the overlay, so that it grows with the outage;
    - `behind_events`: matching events in those ticks, where the driver knows (`behind_events`;
      0 when nothing is behind), else None.
    """
    newest = max((h.last_tick for h in heads.values()), default=0)
    tails = {p: h.last_tick for p, h in seen.items()}
    pubends: dict[str, dict[str, Any]] = {}
    for pubend in sorted({*seen, *outages, *end.positions}):
        covered = max(end.position(pubend), clear.get(pubend, 0))
        reachable = pubend in heads
        tail = tails.get(pubend)
        reference = (tail if reachable else max(newest, tail or 0)) or covered
        behind_ticks = max(0, reference - covered)
        outage = outages.get(pubend)
        head = seen.get(pubend)
        pubends[pubend] = {
            "behind_events": 0 if reachable and behind_ticks == 0 else behind_events.get(pubend) if reachable else None,
            "behind_ticks": behind_ticks,
            "broker": head.address if head else (outage.address if outage else None),
            "reachable": reachable,
            "tail": tail,
            "unreachable_ms": 0 if outage is None else (now - outage.since_ns) // 1_000_000,
        }
    latest = end.moved(tails).to_json()
    return {**latest, "pubends": pubends, "unreachable": sorted(outages)}
