import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.reliability.ticks import (
    TICK_MAX,
    Curiosity,
    CuriosityMap,
    Knowledge,
    KnowledgeMap,
    TickMap,
)

from .ticks_reference import HIGH_MIN, LOW_MAX, ReferenceMap

Q, D, F, L = Knowledge.Q, Knowledge.D, Knowledge.F, Knowledge.L
N, C, A = Curiosity.N, Curiosity.C, Curiosity.A

TICKS = st.one_of(st.integers(0, LOW_MAX), st.integers(HIGH_MIN, TICK_MAX))
RANGES = st.tuples(TICKS, TICKS).map(sorted).map(tuple)


def same(fast, reference) -> None:
    fast.check()
    assert fast.runs(0, TICK_MAX) == reference.runs(0, TICK_MAX)
    assert fast.get(0) == reference.get(0)


# -- TickMap with plain values ----------------------------------------------------------------

INT_VALUES = st.integers(0, 3)
VALUE_SETS = st.frozensets(INT_VALUES, max_size=4)

MAP_OPS = st.one_of(
    st.tuples(st.just("assign"), RANGES, INT_VALUES),
    st.tuples(st.just("assign_where"), RANGES, VALUE_SETS, INT_VALUES),
    st.tuples(st.just("get"), TICKS),
    st.tuples(st.just("runs"), RANGES),
    st.tuples(st.just("first"), TICKS, VALUE_SETS),
    st.tuples(st.just("prefix_end"), TICKS, VALUE_SETS),
    st.tuples(st.just("forget_through"), TICKS),
)


def apply(target, op):
    name, *args = op
    if name in ("assign", "runs", "assign_where", "accumulate", "finalize", "mark_lost", "sparsen", "curious",
                "forget_curiosity", "anti"):
        (after, through), *rest = args
        return getattr(target, name)(after, through, *rest)
    return getattr(target, name)(*args)


@settings(max_examples=400)
@given(st.integers(0, 3), st.lists(MAP_OPS, max_size=40))
def test_tick_map_matches_the_per_tick_reference(default, ops):
    fast, reference = TickMap(default), ReferenceMap(default)
    for op in ops:
        assert apply(fast, op) == apply(reference, op), op
        same(fast, reference)


# -- knowledge ----------------------------------------------------------------------------------

@st.composite
def knowledge_ops(draw):
    kind = draw(st.sampled_from(["accumulate", "accumulate", "accumulate", "finalize", "mark_lost",
                                 "sparsen", "assign", "forget_through", "prefix_end", "first"]))
    after, through = draw(RANGES)
    if kind == "sparsen":  # ordered disjoint ranges inside the range, from pairs of points
        points = sorted({t for t in draw(st.lists(TICKS, max_size=8)) if after <= t <= through})
        return (kind, (after, through), list(zip(points[0::2], points[1::2], strict=False)))
    if kind == "accumulate":
        ticks = draw(st.lists(TICKS, max_size=6))
        return (kind, (after, through), sorted({t for t in ticks if after < t <= through}))
    if kind == "assign":
        return (kind, (after, through), draw(st.sampled_from(list(Knowledge))))
    if kind == "forget_through":
        return (kind, after)
    if kind in ("prefix_end", "first"):
        return (kind, after, draw(st.frozensets(st.sampled_from(list(Knowledge)))))
    return (kind, (after, through))


KNOWLEDGE_OPS = knowledge_ops()


@settings(max_examples=400)
@given(st.lists(KNOWLEDGE_OPS, max_size=40))
def test_knowledge_map_matches_the_per_tick_reference(ops):
    fast, reference = KnowledgeMap(), ReferenceMap(Q)
    for op in ops:
        got, expected = apply(fast, op), apply(reference, op)
        if op[0] == "accumulate":
            got = (got.changed, got.conflicts, got.data_on_final)
        assert got == expected, op
        same(fast, reference)


def test_accumulate_raises_q_and_reports_what_changed():
    k = KnowledgeMap()
    result = k.accumulate(0, 10, [5])
    assert result.changed == [(0, 4, F), (4, 5, D), (5, 10, F)]
    assert (result.conflicts, result.data_on_final) == (0, 0)
    assert k.runs(0, 12) == [(0, 4, F), (4, 5, D), (5, 10, F), (10, 12, Q)]
    # a silence over known and unknown ticks: only the unknown ones change; D at 5 offered as F
    result = k.accumulate(3, 15, [])
    assert result.changed == [(10, 15, F)]
    assert result.conflicts == 1
    assert k.runs(0, 20) == [(0, 4, F), (4, 5, D), (5, 15, F), (15, 20, Q)]
    k.check()


def test_data_on_final_and_lost_ticks_is_counted_and_ignored():
    k = KnowledgeMap()
    k.accumulate(0, 10, [])
    k.mark_lost(10, 20)
    result = k.accumulate(5, 25, [7, 15, 22])
    assert result.changed == [(20, 21, F), (21, 22, D), (22, 25, F)]
    assert (result.conflicts, result.data_on_final) == (0, 2)
    assert k.get(7) is F and k.get(15) is L and k.get(22) is D


def test_finalize_turns_only_d_into_f():
    k = KnowledgeMap()
    k.accumulate(0, 10, [3, 4, 8])
    assert k.finalize(0, 20) == [(2, 4), (7, 8)]
    assert k.runs(0, 20) == [(0, 10, F), (10, 20, Q)]
    assert k.finalize(0, 20) == []


def test_mark_lost_leaves_known_ticks_alone():
    k = KnowledgeMap()
    k.accumulate(10, 20, [15])
    assert k.mark_lost(0, 30) == [(0, 10), (20, 30)]
    assert k.runs(0, 31) == [(0, 10, L), (10, 14, F), (14, 15, D), (15, 20, F), (20, 30, L), (30, 31, Q)]


def test_empty_ranges_do_nothing_and_bad_arguments_raise_before_any_change():
    k = KnowledgeMap()
    k.accumulate(2, 4, [3])
    before = k.runs(0, TICK_MAX)
    assert k.accumulate(5, 5, []).changed == []
    assert k.runs(5, 5) == []
    k.assign(7, 7, D)
    assert k.run_count == 4
    with pytest.raises(ValueError):
        k.accumulate(5, 5, [5])
    for bad in [(6, 5), (-1, 5), (0, TICK_MAX + 1)]:
        with pytest.raises(ValueError):
            k.runs(*bad)
        with pytest.raises(ValueError):
            k.assign(*bad, F)
        with pytest.raises(ValueError):
            k.accumulate(*bad, [])
    with pytest.raises(ValueError):
        k.accumulate(0, 10, [5, 5])
    with pytest.raises(ValueError):
        k.accumulate(0, 10, [11])
    with pytest.raises(ValueError):
        k.accumulate(0, 10, [0])
    with pytest.raises(ValueError):
        k.get(-1)
    with pytest.raises(ValueError):
        k.accumulate(0, 10, [2, 1])  # 2 alone would change ticks 1..2: nothing may change
    with pytest.raises(ValueError):
        k.forget_through(TICK_MAX + 1)
    assert k.runs(0, TICK_MAX) == before


def test_huge_ticks():
    k = KnowledgeMap()
    result = k.accumulate(TICK_MAX - 3, TICK_MAX, [TICK_MAX])
    assert result.changed == [(TICK_MAX - 3, TICK_MAX - 1, F), (TICK_MAX - 1, TICK_MAX, D)]
    assert k.get(TICK_MAX) is D
    assert k.first(TICK_MAX, frozenset({Q})) is None
    assert k.prefix_end(TICK_MAX, frozenset({Q})) == TICK_MAX
    assert k.prefix_end(0, frozenset({Q})) == TICK_MAX - 3
    assert k.first(0, frozenset({D})) == TICK_MAX
    k.forget_through(TICK_MAX)
    assert k.runs(0, TICK_MAX) == [(0, TICK_MAX, D)]
    k.check()


def test_prefix_end_is_forever_when_the_default_qualifies():
    m = TickMap(0)
    assert m.prefix_end(0, frozenset({0})) == TICK_MAX
    m.assign(10, 20, 1)
    assert m.prefix_end(0, frozenset({0})) == 10
    assert m.prefix_end(10, frozenset({0})) == 10
    assert m.prefix_end(20, frozenset({0})) == TICK_MAX
    assert m.first(0, frozenset({1})) == 11
    assert m.first(20, frozenset({1})) is None


# -- curiosity ----------------------------------------------------------------------------------

CURIOSITY_OPS = st.one_of(
    st.tuples(st.sampled_from(["curious", "forget_curiosity", "anti"]), RANGES),
    st.tuples(st.just("ack_through"), TICKS),
    st.tuples(st.just("forget_through"), TICKS),
    st.tuples(st.just("first"), TICKS, st.frozensets(st.sampled_from(list(Curiosity)))),
)


@settings(max_examples=300)
@given(st.lists(CURIOSITY_OPS, max_size=40))
def test_curiosity_map_matches_the_per_tick_reference(ops):
    fast, reference = CuriosityMap(), ReferenceMap(N)
    for op in ops:
        assert apply(fast, op) == apply(reference, op), op
        same(fast, reference)


def test_nacks_consolidate_and_acks_stick():
    c = CuriosityMap()
    assert c.curious(10, 20) == [(10, 20)]
    assert c.curious(5, 25) == [(5, 10), (20, 25)]  # only the ticks not already asked for
    c.ack_through(12)
    assert c.runs(0, 30) == [(0, 12, A), (12, 25, C), (25, 30, N)]
    assert c.forget_curiosity(0, 30) == [(12, 25)]
    assert c.curious(0, 15) == [(12, 15)]  # acked ticks are never asked for again
    c.anti(14, 40)
    assert c.runs(0, 50) == [(0, 12, A), (12, 14, C), (14, 40, A), (40, 50, N)]
    c.check()


# -- memory -------------------------------------------------------------------------------------

@settings(max_examples=100)
@given(st.lists(st.tuples(st.integers(1, 50), st.lists(st.integers(1, 50), max_size=4),
                          st.integers(0, 3)), max_size=60))
def test_run_count_stays_bounded_when_batches_are_acked_and_forgotten(batches):
    """A stream that accumulates consecutive batches, finalizes what is acked and forgets the final
    prefix holds a few runs per unacked batch, however long it lives."""
    k, c = KnowledgeMap(), CuriosityMap()
    through = acked = 0
    unacked: list[int] = []
    for width, offsets, ack_lag in batches:
        after, through = through, through + width
        k.accumulate(after, through, sorted({after + o for o in offsets if o <= width}))
        unacked.append(through)
        while len(unacked) > ack_lag:  # the subscriber acks all but the last ack_lag batches
            acked = unacked.pop(0)
        c.ack_through(acked)
        k.finalize(0, acked)
        k.forget_through(acked)
        c.forget_through(acked)
        k.check()
        c.check()
        assert k.run_count <= 2 + 9 * len(unacked)
        assert c.run_count <= 2


@st.composite
def bursts(draw):
    """A knowledge message as a burst makes it: runs of consecutive data ticks with gaps between."""
    after = draw(st.integers(0, 50))
    ticks, tick = [], after
    for gap, length in draw(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 12)), max_size=6)):
        ticks += range(tick + gap + 1, tick + gap + 1 + length)
        tick = ticks[-1]
    return after, tick + draw(st.integers(0 if ticks else 1, 5)), ticks


@settings(max_examples=300)
@given(st.lists(bursts(), min_size=1, max_size=6))
def test_bursts_of_consecutive_data_ticks_match_the_per_tick_reference(messages):
    fast, reference = KnowledgeMap(), ReferenceMap(Q)
    for after, through, ticks in messages:
        got = fast.accumulate(after, through, ticks)
        assert (got.changed, got.conflicts, got.data_on_final) == reference.accumulate(after, through, ticks)
        same(fast, reference)


def test_a_run_of_consecutive_data_ticks_past_the_range_raises_before_any_change():
    k = KnowledgeMap()
    for ticks in ([9, 10, 11], [3, 9, 10, 11], [3, 4, 5, 5], [1, 2, 3, 2]):
        with pytest.raises(ValueError):
            k.accumulate(0, 10, ticks)
    assert k.runs(0, TICK_MAX) == [(0, TICK_MAX, Q)]
