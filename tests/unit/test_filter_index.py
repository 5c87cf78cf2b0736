"""The subscription index against brute force, the covers it files filters under, and its trie."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.core.channels import pattern_matches
from tidings.core.errors import ChannelError, FilterError
from tidings.core.filters import Filter, SubscriptionIndex, parse_filter
from tidings.core.filters.cover import ACCESSES_MAX, Cover, Equal, Range, access_holds, cover_of
from tidings.core.filters.syntax import Comparison, Membership, Node, Not, Or, unparse

from .filter_reference import (
    BruteForceIndex,
    Count,
    Label,
    attribute_maps,
    channels,
    evaluate,
    odd_attribute_maps,
    patterns,
    trees,
)


def parsed(node: Node) -> Filter | None:
    try:
        return parse_filter(unparse(node))
    except FilterError:
        return None     # nested past the depth limit: such a filter never reaches the index


# -- covers: a necessary condition, and the residual decides once an access holds -------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, st.lists(st.one_of(attribute_maps, odd_attribute_maps), min_size=1, max_size=8))
def test_a_cover_holds_whenever_its_filter_does(node: Node, events: list[dict[str, object]]) -> None:
    cover = cover_of(node)
    if cover is None:
        return
    assert 0 < len(cover.accesses) <= ACCESSES_MAX
    for attributes in events:
        hit = any(access_holds(a, attributes) for a in cover.accesses)
        if evaluate(node, attributes):
            assert hit, (unparse(node), attributes, cover)
        if hit:
            residual = cover.residual is None or evaluate(cover.residual, attributes)
            assert residual == evaluate(node, attributes), (unparse(node), attributes, cover)


@pytest.mark.parametrize(("text", "kinds", "exact"), [
    ('host = "h17"', ["Equal"], True),
    ('site in ("a", "b", "a")', ["Equal", "Equal"], True),
    ("x in (1, 1.0, true)", ["Equal", "Equal"], True),
    ("load > 3.5", ["Range"], True),
    ('startswith(k, "2.6")', ["Prefix"], True),
    ("exists(k)", ["Present"], True),
    ("k != 1", ["Present"], False),
    ("k not in (1)", ["Present"], False),
    ('load > 3.5 and host = "h1"', ["Equal"], True),
    ('site in ("a", "b") and load > 3.5 and k != 1', ["Equal", "Equal"], False),
    ('site in ("a", "b") and not load > 3.5', ["Equal", "Equal"], False),
    ('load > 3.5 and startswith(k, "2.6")', ["Prefix"], True),
    ('load > 3.5 and mem < 2', ["Range"], False),
    ('k != "x" and startswith(k, "2.6")', ["Prefix"], False),
    ("a = 1 or b = 2", ["Equal", "Equal"], True),
    ("not (a != 1 or b = 2)", None, None),
    ("not not a = 1", ["Equal"], True),
    ("not (not a = 1 or not b < 2)", ["Equal"], False),
    ("a = 1 or not b = 2", None, None),
    ("not a = 1", None, None),
])
def test_covers_of_typical_filters(text: str, kinds: list[str] | None, exact: bool | None) -> None:
    cover = cover_of(parse_filter(text).ast)
    if kinds is None:
        assert cover is None
        return
    assert cover is not None
    assert [type(a).__name__ for a in cover.accesses] == kinds
    assert cover.exact == exact


def test_an_equality_is_refined_by_a_range_of_the_same_conjunction() -> None:
    cover = cover_of(parse_filter('site in ("a", "b") and load > 3.5 and x != 1').ast)
    assert cover is not None
    assert cover.accesses == (Equal("site", "a", Range("load", ">", 3.5)), Equal("site", "b", Range("load", ">", 3.5)))
    assert cover.residual == Comparison("x", "!=", 1)
    assert access_holds(cover.accesses[0], {"site": "a", "load": 4})
    assert not access_holds(cover.accesses[0], {"site": "a", "load": 3})
    assert not access_holds(cover.accesses[0], {"site": "a"})
    # Under a negation a comparison holds on missing attributes: it is never a refinement.
    assert cover_of(parse_filter('not (not site = "a" or load <= 3)').ast) == Cover(
        (Equal("site", "a"),), 1, Not(Comparison("load", "<=", 3)))


def test_a_huge_cover_falls_back_to_scanning() -> None:
    # The text limit keeps parsed filters below ACCESSES_MAX; the guard holds for any tree.
    half = Membership("a", tuple(range(ACCESSES_MAX // 2 + 1)))
    assert cover_of(Or((half, Membership("b", half.values)))) is None
    assert cover_of(Or((half, Comparison("b", "=", 1)))) is not None


# -- an exhaustive grid: every combination of a few values on three names ----------------------------

GRID_FILTERS = [
    'x != 1 and exists(y)', 'x not in (1, "a") and y != 2', 'exists(x) and x != 1 and not y = 1',
    'x = 1 and y > 0', 'x in (1, "a", true) and y <= 1.5', 'y >= 0 and x = "ab"',
    'startswith(k, "a") and y < 1', 'startswith(k, "") and x >= "a"', 'y > 0 and startswith(k, "ab")',
    'startswith(k, "a") and startswith(k, "ab")', 'startswith(k, "b") or startswith(k, "ab")',
    '(x = 1 or x = "a") and (y > 0 or k = "b")', '(x = 1 or y = 1) and k < "b"',
    'not (x != 1 or y <= 0)', 'not (not x = 1 or not y > 0)', 'not (x = 1 and y = 1)',
    'x = true or y = false', 'x = 1 or exists(k)', 'x > 0 and y > 0 and k > "a"',
    'x not in (true) and y != false', 'k in ("a", "b") and k >= "ab"', 'x = 1 and x > 0.5',
]
GRID_VALUES = [_MISSING_VALUE := object(), 0, 1, 1.5, True, False, "a", "ab", "b"]
GRID_EVENTS = [
    {name: value for name, value in zip("xyk", values, strict=True) if value is not _MISSING_VALUE}
    for values in itertools.product(GRID_VALUES, repeat=3)
]


@pytest.mark.parametrize("text", GRID_FILTERS)
def test_cover_and_residual_on_the_grid(text: str) -> None:
    node = parse_filter(text).ast
    cover = cover_of(node)
    for attributes in GRID_EVENTS:
        expected = evaluate(node, attributes)
        if cover is None:
            continue
        hit = any(access_holds(a, attributes) for a in cover.accesses)
        assert hit or not expected, (text, attributes)
        if hit:
            assert (cover.residual is None or evaluate(cover.residual, attributes)) == expected, (text, attributes)


@pytest.mark.parametrize("scan_max", [0, 6])
def test_index_on_the_grid(scan_max: int) -> None:
    index = SubscriptionIndex(scan_entries_max=scan_max)
    reference = BruteForceIndex()
    for key, text in enumerate(GRID_FILTERS):
        for i, pattern in enumerate(("c/#", "c/+", "c/d")):
            index.add(key * 3 + i, pattern, parse_filter(text))
            reference.add(key * 3 + i, pattern, parse_filter(text).ast)
    for attributes in GRID_EVENTS:
        assert index.match("c/d", attributes) == reference.match("c/d", attributes), attributes


def test_cache_follows_layout_changes() -> None:
    index = SubscriptionIndex(scan_entries_max=1)
    index.add(1, "a/+", parse_filter("x = 1"))
    index.add(2, "a/+", parse_filter("y > 1"))
    assert index.match("a/b", {"x": 1, "y": 2}) == [1, 2]
    index.add(3, "a/+", parse_filter("not x = 5"))            # the first entry without a cover
    assert index.match("a/b", {"x": 1, "y": 2}) == [1, 2, 3]
    index.add(7, "a/+", parse_filter("x = 1 or y > 1"))       # the first one to deduplicate
    assert index.match("a/b", {"x": 1, "y": 2}) == [1, 2, 3, 7]
    index.remove(7)
    index.add(4, "a/+", parse_filter('z = 1 or startswith(w, "q")'))   # new slots; dedupe
    assert index.match("a/b", {"z": 1, "w": "qq"}) == [3, 4]
    index.add(5, "a/+", None)                                 # the first unfiltered key
    assert index.match("a/b", {}) == [3, 5]
    for key, expected in [(3, [1, 2, 4, 5]), (4, [1, 2, 5]), (5, [1, 2]), (2, [1])]:
        index.remove(key)
        index.check()
        assert index.match("a/b", {"x": 1, "y": 2, "z": 1}) == expected
    index.add(6, "a/#", parse_filter("y > 1"))                # a new pattern matching a cached channel
    assert index.match("a/b", {"x": 1, "y": 2}) == [1, 6]
    index.check()


# -- the index against brute force -------------------------------------------------------------------



_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), patterns(), st.one_of(st.none(), trees)),
        st.tuples(st.just("remove"), st.integers(0, 10_000)),
        st.tuples(st.just("match"), channels, st.one_of(attribute_maps, odd_attribute_maps)),
    ),
    max_size=60,
)


# Size classes (scan_entries_max, merge_entries_min): every group probed and merged; small groups run
# outright, the others merged; small, narrow (own tables) and wide (merged); none merged.
_SIZES = st.sampled_from([(0, 0), (1, 2), (0, 3), (6, 64)])
# Table budgets (merged_filings_ratio_max, table_filings_slack): roomy; merged sets refused or
# dropped now and then (the plan reuses merged subsets); never a merged set.
_BUDGETS = st.sampled_from([(1.5, 4096), (0.5, 0), (0.0, 0)])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops, _SIZES, st.sampled_from([0, 1, 4096]), _BUDGETS)
def test_index_equals_brute_force(ops: list[tuple[Any, ...]], sizes: tuple[int, int], cache_max: int,
                                  budget: tuple[float, int]) -> None:
    index = SubscriptionIndex(scan_entries_max=sizes[0], merge_entries_min=sizes[1],
                              channel_cache_entries_max=cache_max,
                              merged_filings_ratio_max=budget[0], table_filings_slack=budget[1])
    reference = BruteForceIndex()
    next_key = 0
    for op in ops:
        if op[0] == "add":
            flt = None if op[2] is None else parsed(op[2])
            if op[2] is not None and flt is None:
                continue
            index.add(next_key, op[1], flt)
            reference.add(next_key, op[1], None if flt is None else flt.ast)
            next_key += 1
        elif op[0] == "remove":
            keys = sorted(reference.subscriptions)
            if keys:
                key = keys[op[1] % len(keys)]
                index.remove(key)
                reference.remove(key)
        else:
            assert index.match(op[1], op[2]) == reference.match(op[1], op[2]), op
        assert len(index) == len(reference.subscriptions)
        index.check()
    for key in sorted(reference.subscriptions):
        index.remove(key)
    assert len(index) == 0
    index.check()  # nothing left behind: no group, no trie node


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(["a/+", "a/#", "#", "a/b"]), trees), min_size=10, max_size=40),
    st.lists(st.tuples(channels, st.one_of(attribute_maps, odd_attribute_maps)), min_size=1, max_size=20),
    st.sampled_from([64, 8]),
)
def test_large_groups_use_the_attribute_index_and_equal_brute_force(
    subscriptions: list[tuple[str, Node]], events: list[tuple[str, dict[str, object]]], merge_min: int,
) -> None:
    index = SubscriptionIndex(merge_entries_min=merge_min)
    reference = BruteForceIndex()
    for key, (pattern, node) in enumerate(subscriptions):
        flt = parsed(node)
        if flt is not None:
            index.add(key, pattern, flt)
            reference.add(key, pattern, flt.ast)
    for channel, attributes in events:
        assert index.match(channel, attributes) == reference.match(channel, attributes)
    for key in sorted(reference.subscriptions)[::2]:
        index.remove(key)
        reference.remove(key)
    for channel, attributes in events:
        assert index.match(channel, attributes) == reference.match(channel, attributes)


# -- values that Python considers equal but a filter does not ----------------------------------------

COLLISIONS = [
    ("x = 1", {"x": True}, False),
    ("x = 1", {"x": 1.0}, True),
    ("x = 1.0", {"x": 1}, True),
    ("x = true", {"x": 1}, False),
    ("x = true", {"x": True}, True),
    ("x = false", {"x": 0}, False),
    ("x = 0", {"x": False}, False),
    ("x = 0", {"x": -0.0}, True),
    ("x in (1, 2)", {"x": True}, False),
    ("x in (true)", {"x": 1.0}, False),
    ("x in (1, true)", {"x": 1.0}, True),
    ("x in (1, true)", {"x": True}, True),
    ("x > 0", {"x": True}, False),
    ("x >= 0", {"x": False}, False),
    ("x < 2", {"x": "1"}, False),
    ('x = "1"', {"x": 1}, False),
    ('x > "a"', {"x": 5}, False),
    ('x > "a"', {"x": "b"}, True),
    ("x != 1", {"x": True}, False),
    ("x != 2", {"x": True}, False),
    ("x != 1.5", {"x": False}, False),
    ("x != true", {"x": 1}, False),
    ('x != "a"', {"x": 1}, False),
    ("x != 1", {"x": "a"}, False),
    ("x != 1", {"x": 2.5}, True),
    ("x not in (2)", {"x": True}, False),
    ("x != 1", {}, False),
    ("not x = 1", {}, True),
    ("x != true", {"x": False}, True),
    ("x != true", {"x": 0}, False),
    ("x not in (1, 2)", {"x": True}, False),
    ("x not in (1, true)", {"x": False}, True),
    ('x not in (1, "a")', {"x": 3.5}, True),
    ("x = 9007199254740993", {"x": 9007199254740992.0}, False),
    ("x > 9007199254740992", {"x": 9007199254740993}, True),
    ('startswith(x, "1")', {"x": 12}, False),
    ('startswith(x, "")', {"x": ""}, True),
    ('startswith(x, "ab")', {"x": Label("abc")}, True),
    ("x = 1", {"x": Count(1)}, True),
    ("x > 0", {"x": float("nan")}, False),
    ("x <= 0", {"x": float("nan")}, False),
    ("x != 0", {"x": float("nan")}, True),
    ("exists(x)", {"x": None}, True),
    ("x = 1", {"x": None}, False),
]


@pytest.mark.parametrize(("text", "attributes", "expected"), COLLISIONS)
@pytest.mark.parametrize("scan_max", [0, 100])
def test_collisions(text: str, attributes: dict[str, object], expected: bool, scan_max: int) -> None:
    flt = parse_filter(text)
    assert flt.matches(attributes) is expected
    assert evaluate(flt.ast, attributes) is expected
    index = SubscriptionIndex(scan_entries_max=scan_max)
    index.add(7, "c", flt)
    # Neighbours sharing the name, so the probes run over non-trivial tables.
    for key, other in enumerate(["x = 1", "x = true", 'x = "1"', "x > 0", "x < 1.5", "exists(x)"], 100):
        index.add(key, "c", parse_filter(other))
    expected_keys = sorted(k for k in index
                           if evaluate(index.subscription(k)[1].ast, attributes))  # type: ignore[union-attr]
    assert (7 in index.match("c", attributes)) is expected
    assert index.match("c", attributes) == expected_keys


# -- the channel stage -------------------------------------------------------------------------------

@pytest.mark.parametrize(("pattern", "channel"), [
    ("#", "a"), ("#", "$sys/x"), ("+/x", "$sys/x"), ("$sys/#", "$sys/x"), ("$sys/+", "$sys/x"),
    ("a/#", "a"), ("a/#", "a/b/c"), ("a/+", "a"), ("a/+", "a/"), ("a/+/c", "a/b/c"), ("a//c", "a//c"),
    ("+", "a/b"), ("+/+", "a/b"), ("a/b", "a/b"), ("a/b", "a/c"), ("+/#", "a"), ("+/#", "$a"),
])
def test_patterns_agree_with_pattern_matches(pattern: str, channel: str) -> None:
    index = SubscriptionIndex()
    index.add(1, pattern, None)
    assert (index.match(channel, {}) == [1]) is pattern_matches(pattern, channel)


def test_add_and_remove_errors() -> None:
    index = SubscriptionIndex()
    index.add(1, "a/+", None)
    with pytest.raises(ValueError, match="already"):
        index.add(1, "b", None)
    with pytest.raises(ChannelError):
        index.add(2, "a/#/b", None)
    with pytest.raises(ChannelError):
        index.add(3, "a+", None)
    with pytest.raises(KeyError):
        index.remove(2)
    assert len(index) == 1
    assert 1 in index
    assert 2 not in index
    index.remove(1)
    with pytest.raises(KeyError):
        index.remove(1)
    assert len(index) == 0


def test_cache_follows_new_and_removed_patterns() -> None:
    index = SubscriptionIndex(channel_cache_entries_max=2)
    index.add(1, "a/b", None)
    assert index.match("a/b", {}) == [1]
    index.add(2, "a/+", parse_filter("x = 1"))
    assert index.match("a/b", {"x": 1}) == [1, 2]
    index.add(3, "a/+", None)                       # existing pattern: the cached groups stay valid
    assert index.match("a/b", {}) == [1, 3]
    for channel in ["a/c", "a/d", "a/e", "a/b"]:    # evictions
        assert index.match(channel, {}) == ([1, 3] if channel == "a/b" else [3])
    assert index.channels_cached == 2
    index.remove(1)
    assert index.match("a/b", {}) == [3]
    index.remove(3)
    index.remove(2)
    assert index.match("a/b", {"x": 1}) == []
    index.check()  # nothing left behind


def test_match_order_is_ascending_across_groups() -> None:
    index = SubscriptionIndex(scan_entries_max=0)
    keys = [50, 3, 999, 7, 12, 0, 41]
    for key, pattern in zip(keys, ["#", "a/#", "a/+", "a/b", "+/b", "a/b", "#"], strict=True):
        index.add(key, pattern, parse_filter("x > 1 or y = 2") if key % 2 else None)
    assert index.match("a/b", {"x": 5, "y": 2}) == sorted(keys)
    assert index.match("a/b", {}) == [0, 12, 50]


def test_range_boundaries_equal_brute_force() -> None:
    index = SubscriptionIndex(scan_entries_max=0)
    reference = BruteForceIndex()
    key = 0
    for op in ["<", "<=", ">", ">="]:
        for threshold in ["1", "2", "2.0", "3", '"b"', '"bb"', '""']:
            flt = parse_filter(f"x {op} {threshold}")
            index.add(key, "c", flt)
            reference.add(key, "c", flt.ast)
            key += 1
    for value in [0, 1, 1.5, 2, 2.0, 2.5, 3, 4, -0.0, True, False, "a", "b", "ba", "bb", "c", "", "2", None]:
        assert index.match("c", {"x": value}) == reference.match("c", {"x": value}), value
    assert index.match("c", {}) == []


# -- merged table sets: shared by channels, live through filter changes, budgeted ---------------------

def _wide_index(**limits: Any) -> SubscriptionIndex:
    index = SubscriptionIndex(scan_entries_max=1, merge_entries_min=3, **limits)
    for key, (pattern, text) in enumerate([
        ("n/+/load", 'host = "h1"'), ("n/+/load", "load > 2"), ("n/+/load", 'site in ("s1", "s2") and load > 1'),
        ("n/#", "load > 5"), ("n/#", 'host = "h2"'), ("n/#", "exists(down)"),
        ("n/h1/#", "load > 0"), ("n/h1/#", "mem < 5"),      # narrow: a table set of its own
    ]):
        index.add(key, pattern, parse_filter(text))
    return index


def test_channels_share_one_merged_table_set_that_filter_changes_keep_live() -> None:
    index = _wide_index()
    assert index.match("n/h1/load", {"host": "h1", "load": 3}) == [0, 1, 6]
    assert index.match("n/h2/load", {"host": "h2", "site": "s2", "load": 6}) == [1, 2, 3, 4]
    stats = index.stats()
    assert (stats["tables"], stats["tables_merged"], index.channels_cached) == (2, 1, 2)  # merged + n/h1/#
    index.add(10, "n/+/load", parse_filter("load < 1"))     # a filter more on a wide pattern
    index.remove(1)
    assert index.channels_cached == 2                       # no plan evicted
    assert index.match("n/h2/load", {"host": "h2", "load": 0.5}) == [4, 10]
    index.check()


def test_an_idle_merged_set_is_reused_and_a_tight_budget_splits_the_plan() -> None:
    index = _wide_index()
    assert index.match("n/h2/load", {"load": 9}) == [1, 3]
    index.add(20, "+/+/load", parse_filter("load > 8"))     # matches: the plan goes, its set idles
    index.add(21, "+/+/load", parse_filter("load > 7"))
    index.add(22, "+/+/load", parse_filter("load > 6"))     # now wide too
    assert index.stats()["tables_idle"] == 1
    assert index.match("n/h2/load", {"load": 9}) == [1, 3, 20, 21, 22]
    assert index.stats()["tables_merged"] == 2              # the new set; the idle one kept for reuse
    index.check()
    tight = _wide_index(merged_filings_ratio_max=0.0, table_filings_slack=0)
    assert tight.match("n/h2/load", {"load": 9}) == [1, 3]
    assert tight.stats()["tables_merged"] == 0              # no room: one table set per wide pattern
    tight.check()
