"""TreeMemberships: the broker joins a tree with its first local member and leaves it with its
last, away durable registrations counting as members (core/subscription/memberships.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidings.core.subscription.memberships import TreeMemberships


def test_the_first_member_joins_the_tree_and_the_last_leaves_it():
    m = TreeMemberships()
    assert m.first("a/#")
    m.join(1, "a/#")
    assert not m.first("a/#")
    m.join(2, "a/#")
    m.join(3, "b/#")
    assert m.members == {"a/#": 2, "b/#": 1}
    assert m.subends_on("a/#") == [1, 2]
    assert m.leave(1, held=False) == ("a/#", False)
    assert m.leave(2, held=False) == ("a/#", True)
    assert m.first("a/#")
    assert m.tree_of == {3: "b/#"} and m.members == {"b/#": 1}


def test_an_away_durable_registration_holds_the_tree_until_it_ends():
    m = TreeMemberships()
    m.join(1, "a/#")
    assert m.leave(1, held=True) == ("a/#", False)  # its subscriber left; the registration stays
    assert m.members == {"a/#": 1} and m.subends_on("a/#") == []
    m.join(2, "a/#")  # it resumes on a new subend, which counts instead
    assert not m.member_gone("a/#")
    assert m.leave(2, held=False) == ("a/#", True)
    assert m.members == {}


def test_registrations_loaded_at_start_count_beside_the_subends():
    m = TreeMemberships()
    m.join(1, "a/#")
    m.hold("a/#", 2)
    m.hold("b/#", 1)
    assert m.members == {"a/#": 3, "b/#": 1}
    assert list(m.members) == ["a/#", "b/#"]  # the order the broker joins them in
    assert m.member_gone("b/#")
    assert m.leave(1, held=False) == ("a/#", False)
    assert not m.member_gone("a/#")
    assert m.member_gone("a/#")


TREES = ("a/#", "b/#", "#")
operations = st.lists(st.one_of(
    st.tuples(st.just("join"), st.integers(0, 7), st.sampled_from(TREES)),
    st.tuples(st.just("leave"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("hold"), st.sampled_from(TREES), st.integers(1, 3)),
    st.tuples(st.just("gone"), st.sampled_from(TREES))), max_size=60)


@given(operations)
def test_the_broker_is_on_a_tree_exactly_while_it_has_a_member_there(ops):
    """Against a reference that keeps the subends and the away registrations apart."""
    m = TreeMemberships()
    subends: dict[int, str] = {}
    away: dict[str, int] = {}

    def on(tree: str) -> bool:
        return tree in subends.values() or away.get(tree, 0) > 0

    for op in ops:
        if op[0] == "join" and op[1] not in subends:
            _, key, tree = op
            assert m.first(tree) == (not on(tree))
            m.join(key, tree)
            subends[key] = tree
        elif op[0] == "leave" and op[1] in subends:
            _, key, held = op
            tree = subends.pop(key)
            away[tree] = away.get(tree, 0) + held
            assert m.leave(key, held) == (tree, not on(tree))
        elif op[0] == "hold":
            _, tree, count = op
            m.hold(tree, count)
            away[tree] = away.get(tree, 0) + count
        elif op[0] == "gone" and away.get(op[1], 0) > 0:
            tree = op[1]
            away[tree] -= 1
            assert m.member_gone(tree) == (not on(tree))
        assert m.tree_of == subends
        assert m.members == {t: n for t in TREES
                             if (n := sum(1 for s in subends.values() if s == t) + away.get(t, 0))}
        for tree in TREES:
            assert m.subends_on(tree) == [k for k, t in subends.items() if t == tree]
