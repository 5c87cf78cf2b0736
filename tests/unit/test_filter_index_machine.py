"""The subscription index held equal to brute force by a Hypothesis state machine.

Adds, removes and matches interleave in any order, over patterns with `+`, `#` and `$` segments,
filters drawn from every construct of docs/filters.md (comparisons with each operator, `in` and
`not in`, `exists`, `startswith`, `not`, `and`, `or`) and events with missing attributes, values
of every kind against literals of every kind, NaN, None and str/int subclasses. Each run draws the
index's size classes, cache size and table budget, so plans are cached, evicted and rebuilt, groups
move between small, narrow and wide, and merged table sets are made, shared, left idle, dropped
and reused while filters come and go. After every step `check()` asserts the index's invariants,
among them that every table set holds exactly its groups' entries.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tidings.core.errors import FilterError
from tidings.core.filters import SubscriptionIndex, parse_filter
from tidings.core.filters.syntax import Node, unparse

from .filter_reference import BruteForceIndex, attribute_maps, channels, odd_attribute_maps, patterns, trees

# (scan_entries_max, merge_entries_min, channel_cache_entries_max, merged_filings_ratio_max, slack)
CONFIGS = [
    (0, 0, 4096, 1.5, 4096),    # every filtered group wide: one merged table set per channel
    (1, 2, 4096, 1.5, 4096),    # small, then wide
    (0, 3, 2, 0.5, 0),          # narrow and wide, a cache of two channels, a tight budget
    (1, 2, 0, 0.5, 0),          # no cache: a plan per event
    (6, 64, 4096, 1.5, 4096),   # the defaults: small groups run outright, the others narrow
    (0, 1, 4096, 0.0, 0),       # no room for a merged set: one table set per group
]


class IndexAgainstBruteForce(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.index = SubscriptionIndex()
        self.reference = BruteForceIndex()
        self.next_key = 0

    @initialize(config=st.sampled_from(CONFIGS))
    def configure(self, config: tuple[int, int, int, float, int]) -> None:
        scan_max, merge_min, cache_max, ratio, slack = config
        self.index = SubscriptionIndex(
            scan_entries_max=scan_max, merge_entries_min=merge_min, channel_cache_entries_max=cache_max,
            merged_filings_ratio_max=ratio, table_filings_slack=slack,
        )

    @rule(pattern=patterns(), tree=st.one_of(st.none(), trees, trees))
    def add(self, pattern: str, tree: Node | None) -> None:
        try:
            flt = None if tree is None else parse_filter(unparse(tree))
        except FilterError:
            return      # nested past the depth limit: never reaches an index
        self.index.add(self.next_key, pattern, flt)
        self.reference.add(self.next_key, pattern, None if flt is None else flt.ast)
        self.next_key += 1

    @precondition(lambda self: self.reference.subscriptions)
    @rule(pick=st.integers(0, 10_000))
    def remove(self, pick: int) -> None:
        keys = sorted(self.reference.subscriptions)
        key = keys[pick % len(keys)]
        self.index.remove(key)
        self.reference.remove(key)

    @rule(channel=channels, attributes=st.one_of(attribute_maps, odd_attribute_maps))
    def match(self, channel: str, attributes: dict[str, object]) -> None:
        assert self.index.match(channel, attributes) == self.reference.match(channel, attributes)

    @rule(channel=channels, events=st.lists(st.one_of(attribute_maps, odd_attribute_maps), min_size=2, max_size=6))
    def match_a_run(self, channel: str, events: list[dict[str, object]]) -> None:
        for attributes in events:   # one cached plan, many events
            assert self.index.match(channel, attributes) == self.reference.match(channel, attributes)

    @invariant()
    def holds_its_invariants(self) -> None:
        assert len(self.index) == len(self.reference.subscriptions)
        self.index.check()

    def teardown(self) -> None:
        for key in sorted(self.reference.subscriptions):
            self.index.remove(key)
        assert len(self.index) == 0
        self.index.check()      # nothing left behind: no group, no trie node, no table set


IndexAgainstBruteForce.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow],
)
test_index_against_brute_force = IndexAgainstBruteForce.TestCase
