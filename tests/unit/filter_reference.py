"""Reference semantics of content filters and of the subscription index, and their generators.

`evaluate` walks the syntax tree and states each rule of docs/filters.md as directly as it can,
sharing no code with the compiled closures (`predicate.py`) or the index. `BruteForceIndex` tests
every subscription against every event. The Hypothesis strategies draw trees, attributes,
patterns and channels from small alphabets so that names, values and segments collide often:
True against 1 against 1.0, "1" against 1, missing attributes, `$` channels.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from hypothesis import strategies as st

from tidings.core.channels import pattern_matches
from tidings.core.filters.syntax import (
    And,
    Comparison,
    Exists,
    Membership,
    Node,
    Not,
    Or,
    StartsWith,
)

_OPS: dict[str, Callable[[object, object], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def kind(value: object) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def comparable(a: object, b: object) -> bool:
    return kind(a) is not None and kind(a) == kind(b)


def evaluate(node: Node, attributes: dict[str, object]) -> bool:
    match node:
        case Comparison() | Membership():
            result = node.name in attributes and _compare(node, attributes[node.name])
        case Exists(name=name):
            result = name in attributes
        case StartsWith(name=name, prefix=prefix):
            value = attributes.get(name)
            result = isinstance(value, str) and value.startswith(prefix)
        case Not(operand=operand):
            result = not evaluate(operand, attributes)
        case And(operands=operands):
            result = all(evaluate(child, attributes) for child in operands)
        case Or(operands=operands):
            result = any(evaluate(child, attributes) for child in operands)
    return result


def _compare(node: Comparison | Membership, value: object) -> bool:
    """The atom on a present attribute `value`."""
    if isinstance(node, Comparison):
        if not comparable(value, node.value):
            return False
        if kind(node.value) == "boolean" and node.op not in ("=", "!="):
            return False
        return bool(_OPS[node.op](value, node.value))
    same_kind = [v for v in node.values if comparable(value, v)]
    if node.negated:
        return bool(same_kind) and all(value != v for v in same_kind)
    return any(value == v for v in same_kind)


class BruteForceIndex:
    """What SubscriptionIndex must answer, computed the slow and obvious way."""

    def __init__(self) -> None:
        self.subscriptions: dict[int, tuple[str, Node | None]] = {}

    def add(self, key: int, pattern: str, tree: Node | None) -> None:
        assert key not in self.subscriptions
        self.subscriptions[key] = (pattern, tree)

    def remove(self, key: int) -> None:
        del self.subscriptions[key]

    def match(self, channel: str, attributes: dict[str, object]) -> list[int]:
        return sorted(
            key for key, (pattern, tree) in self.subscriptions.items()
            if pattern_matches(pattern, channel) and (tree is None or evaluate(tree, attributes))
        )


# -- generators -------------------------------------------------------------------------------------

class Label(str):
    """A str subclass: not on the wire, but a local caller may pass one."""


class Count(int):
    """An int subclass, likewise."""


NAMES = ["a", "b", "c.d", "odd name", "and"]
INTERESTING = [True, False, 0, 1, -1, 1.0, 0.0, -0.0, 2.5, 2**53 + 1, float(2**53), "", "1", "a", "ab", "b"]

literals = st.one_of(
    st.sampled_from(INTERESTING),
    st.integers(-3, 3),
    st.floats(-3, 3, allow_nan=False, allow_infinity=False),
    st.text(alphabet="ab'\"\\\n\t`é", max_size=3),
)
names = st.sampled_from(NAMES)


@st.composite
def comparisons(draw: st.DrawFn) -> Comparison:
    literal = draw(literals)
    ops = ["=", "!="] if isinstance(literal, bool) else list(_OPS)
    return Comparison(draw(names), draw(st.sampled_from(ops)), literal)


atoms = st.one_of(
    comparisons(),
    st.builds(Membership, names, st.lists(literals, min_size=1, max_size=4).map(tuple), st.booleans()),
    st.builds(Exists, names),
    st.builds(StartsWith, names, st.text(alphabet="ab", max_size=2)),
)


def _extend(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    operand_lists = st.lists(children, min_size=2, max_size=3).map(tuple)
    return st.one_of(st.builds(And, operand_lists), st.builds(Or, operand_lists), st.builds(Not, children))


trees = st.recursive(atoms, _extend, max_leaves=8)

values = st.one_of(
    st.sampled_from(INTERESTING),
    st.integers(-3, 3),
    st.floats(-3, 3, allow_nan=False, allow_infinity=False),
    st.text(alphabet="ab", max_size=3),
)
odd_values = st.sampled_from([None, Label("a"), Label("ab"), Count(1), Count(2), float("nan")])
attribute_maps = st.dictionaries(names, values, max_size=4)
odd_attribute_maps = st.dictionaries(names, st.one_of(values, odd_values), max_size=4)

SEGMENTS = ["a", "b", "$s", ""]
channels = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3).map("/".join).filter(bool)


@st.composite
def patterns(draw: st.DrawFn) -> str:
    segments = draw(st.lists(st.sampled_from([*SEGMENTS, "+"]), min_size=1, max_size=3))
    if draw(st.booleans()):
        segments[-1] = "#"
    pattern = "/".join(segments)
    return pattern or "a"
