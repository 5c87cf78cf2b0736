"""Access predicates: a cheap necessary condition of a filter, for the subscription index.

A *cover* of a filter F is a set of access predicates {A1..Ak}, each answerable by one hash or
bisect probe on a single attribute, such that F(e) implies A1(e) or ... or Ak(e) for every event
e. The index files a subscription under each Ai; an event then reaches only the subscriptions
one of whose Ai it satisfies (the *candidates*), and each candidate is verified with its full
compiled predicate. A cover is *exact* when F is equivalent to the disjunction, so a hit needs no
verification (`host = "h17"`, `site in (...)`, `load > 3.5`).

This is the access-predicate step of a DNF index (Gryphon's matching, the "counting"/"clustering"
algorithms of Fabret et al.) without ever expanding the DNF, whose size can explode: the cover is
computed bottom-up in the filter's own tree, on negation normal form taken on the fly,

    atom            its access predicate, if it has one (table below)
    not atom        none: `not (a = 1)` holds on events without `a`, nothing to probe
    all-of(X1..Xn)  (an and, or a negated or) the cheapest cover of one Xi: each Xi is necessary
    any-of(X1..Xn)  (an or, or a negated and) the union of the Xi's covers, none if one has none

so its size is at most the number of atoms times the longest `in` list, and bounded again by
ACCESSES_MAX. A filter without a cover goes to the index's scan list.

    atom                    access predicate               exact
    a = v                   EQUAL  (a, key(v))             yes
    a in (v1, ...)          EQUAL  (a, key(vi)) for each   yes
    startswith(a, p)        PREFIX (a, p)                  yes
    a < v, a <= v, ...      RANGE  (a, kind, op, v)        yes
    exists(a)               PRESENT(a)                     yes
    a != v, a not in (...)  PRESENT(a)                     no

`equality_key` maps a value to the dict key it is filed under: booleans to sentinels of their own,
because True == 1 == 1.0 hash alike in Python and must not meet in a filter. The cost of a cover,
used to pick one operand of an and, guesses the share of events reaching it (equality cheapest,
presence dearest); it steers speed only, never results.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.filters.predicate import BOOLEAN, NO_KIND, value_kind
from tidings.core.filters.syntax import (
    ORDERING_OPS,
    And,
    Comparison,
    Exists,
    Literal,
    Membership,
    Node,
    Not,
    Or,
    StartsWith,
)

ACCESSES_MAX = 4096            # access predicates filed for one filter

EQUAL = 0
PREFIX = 1
RANGE = 2
PRESENT = 3

_COST = {EQUAL: 1, PREFIX: 8, RANGE: 32, PRESENT: 128}


class _BoolKey:
    """The key a boolean is filed under: equal only to itself, so never to 1 or 1.0."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"<{self.value}>"


TRUE_KEY = _BoolKey(True)
FALSE_KEY = _BoolKey(False)


def equality_key(value: object) -> object:
    """The dict key `value` is filed and looked up under; None for a value of no kind."""
    kind = value_kind(value)
    if kind == BOOLEAN:
        return TRUE_KEY if value else FALSE_KEY
    if kind == NO_KIND:
        return None
    return value


@dataclass(frozen=True, slots=True)
class Access:
    """One access predicate. `detail` is the equality key, the prefix, or (kind, op, threshold)."""

    kind: int
    name: str
    detail: object = None


@dataclass(frozen=True, slots=True)
class Cover:
    accesses: tuple[Access, ...]
    cost: int
    exact: bool

    @property
    def hits_at_most_once(self) -> bool:
        """True when one event can satisfy at most one access (equalities on a single name)."""
        first = self.accesses[0]
        return all(a.kind == EQUAL and a.name == first.name for a in self.accesses)


def cover_of(node: Node) -> Cover | None:
    """A cover of the filter `node`, or None when it has none (see the module docstring)."""
    return _cover(node, False)


def _cover(node: Node, negated: bool) -> Cover | None:
    if isinstance(node, Not):
        return _cover(node.operand, not negated)
    if isinstance(node, And | Or):
        any_of = isinstance(node, Or) != negated
        children = [_cover(child, negated) for child in node.operands]
        return _union(children) if any_of else _cheapest(children)
    if negated:
        return None
    return _atom_cover(node)


def _cheapest(children: list[Cover | None]) -> Cover | None:
    best: Cover | None = None
    for child in children:
        if child is not None and (best is None or child.cost < best.cost):
            best = child
    if best is None:
        return None
    # Only one operand is covered, so a hit proves nothing about the others.
    return Cover(best.accesses, best.cost, exact=False)


def _union(children: list[Cover | None]) -> Cover | None:
    seen: dict[Access, None] = {}
    exact = True
    for child in children:
        if child is None:
            return None
        seen.update(dict.fromkeys(child.accesses))
        exact = exact and child.exact
        if len(seen) > ACCESSES_MAX:
            return None
    accesses = tuple(seen)
    return Cover(accesses, sum(_COST[a.kind] for a in accesses), exact)


def _atom_cover(node: Node) -> Cover | None:
    if isinstance(node, Comparison):
        if node.op == "=":
            return _single(Access(EQUAL, node.name, equality_key(node.value)), exact=True)
        if node.op in ORDERING_OPS:
            detail = (value_kind(node.value), node.op, node.value)
            return _single(Access(RANGE, node.name, detail), exact=True)
        return _single(Access(PRESENT, node.name), exact=False)
    if isinstance(node, Membership):
        if node.negated:
            return _single(Access(PRESENT, node.name), exact=False)
        keys = dict.fromkeys(equality_key(v) for v in node.values)
        accesses = tuple(Access(EQUAL, node.name, key) for key in keys)
        return Cover(accesses, len(accesses) * _COST[EQUAL], exact=True)
    if isinstance(node, Exists):
        return _single(Access(PRESENT, node.name), exact=True)
    assert isinstance(node, StartsWith)
    return _single(Access(PREFIX, node.name, node.prefix), exact=True)


def _single(access: Access, exact: bool) -> Cover:
    return Cover((access,), _COST[access.kind], exact)


def access_holds(access: Access, attributes: dict[str, object]) -> bool:
    """Whether `attributes` satisfy `access`, by its definition: for tests and for debugging."""
    if access.name not in attributes:
        return False
    value = attributes[access.name]
    if access.kind == PRESENT:
        return True
    if access.kind == EQUAL:
        key = equality_key(value)
        return key is not None and key == access.detail
    if access.kind == PREFIX:
        return isinstance(value, str) and value.startswith(str(access.detail))
    kind, op, threshold = access.detail  # type: ignore[misc]
    if value_kind(value) != kind:
        return False
    return _ORDER[op](value, threshold)


def _lt(x: Literal, y: Literal) -> bool:
    return x < y  # type: ignore[operator]


def _le(x: Literal, y: Literal) -> bool:
    return x <= y  # type: ignore[operator]


def _gt(x: Literal, y: Literal) -> bool:
    return x > y  # type: ignore[operator]


def _ge(x: Literal, y: Literal) -> bool:
    return x >= y  # type: ignore[operator]


_ORDER = {"<": _lt, "<=": _le, ">": _gt, ">=": _ge}
