"""Access predicates: a cheap necessary condition of a filter, for the subscription index.

A *cover* of a filter F is a set of access predicates {A1..Ak}, each answerable by one hash or
bisect probe on a single attribute, such that F(e) implies A1(e) or ... or Ak(e) for every event
e. The index files a subscription under each Ai; an event then reaches only the subscriptions
one of whose Ai it satisfies (the *candidates*). A cover also carries a *residual* R such that
whenever one of the Ai holds, F = R: each candidate is verified with R, not F (for
`host = "h17" and mem_free_mb != 0` filed under the host, R is `mem_free_mb != 0` alone). A cover
is *exact* when R is empty (true): a hit is a match (`host = "h17"`, `load > 3.5`).

This is the access-predicate step of a DNF index (Gryphon's matching, the "counting"/"clustering"
algorithms of Fabret et al.) without ever expanding the DNF, whose size can explode: the cover is
computed bottom-up in the filter's own tree, on negation normal form taken on the fly,

    atom            its access predicate, if it has one (table below)
    not atom        none: `not (a = 1)` holds on events without `a`, nothing to probe
    all-of(X1..Xn)  (an and, or a negated or) the cheapest cover of one Xi: each Xi is necessary
    any-of(X1..Xn)  (an or, or a negated and) the union of the Xi's covers, none if one has none

so its size is at most the number of atoms times the longest `in` list, and bounded again by
ACCESSES_MAX. A filter without a cover goes to the index's scan list. Residuals follow the same
recursion: an exact atom leaves nothing, an inexact one itself; all-of leaves the chosen operand's
residual and-ed with the other operands; any-of leaves nothing if every operand is exact, else
itself (a hit does not say which operand it came from). Invariant, checked by the tests against
the reference evaluator: F(e) implies some Ai(e), and if some Ai(e) then F(e) = R(e).

    atom                    access predicate               exact
    a = v                   Equal(a, key(v))               yes
    a in (v1, ...)          Equal(a, key(vi)) for each     yes
    startswith(a, p)        Prefix(a, p)                   yes
    a < v, a <= v, ...      Range(a, op, v)                yes
    exists(a)               Present(a)                     yes
    a != v, a not in (...)  Present(a)                     no

An all-of with a range atom among its operands and another operand covered by plain
equalities or prefixes files each of those *refined* by the range (a two-level probe, like one
step of Gryphon's parallel search tree): `site in ("a", "b") and load > 3.5` is reached only by
events of site a or b whose load is above 3.5, so it needs no verification at all.

`equality_key` maps a value to the dict key it is filed under: booleans to sentinels of their own,
because True == 1 == 1.0 hash alike in Python and must not meet in a filter. The cost of a cover,
used to pick one operand of an and, guesses the share of events reaching it: equality cheapest,
then a range bound, then a prefix (`startswith(kernel, "2.6")` is usually a family of values),
then presence; it steers speed only, never results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tidings.core.filters.predicate import BOOLEAN, NO_KIND, value_kind
from tidings.core.filters.syntax import (
    ORDERING_OPS,
    And,
    Comparison,
    Exists,
    Membership,
    Node,
    Not,
    Or,
    StartsWith,
)

ACCESSES_MAX = 4096            # access predicates filed for one filter


class _BoolKey:
    """The key a boolean is filed under: equal only to itself, so never to 1 or 1.0."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"<{self.value}>"


TRUE_KEY: Final = _BoolKey(True)
FALSE_KEY: Final = _BoolKey(False)


def equality_key(value: object) -> object:
    """The dict key `value` is filed and looked up under; None for a value of no kind."""
    kind = value_kind(value)
    if kind == BOOLEAN:
        return TRUE_KEY if value else FALSE_KEY
    if kind == NO_KIND:
        return None
    return value


@dataclass(frozen=True, slots=True)
class Range:
    """`name op threshold`; a str threshold bounds strings, a number bounds numbers."""

    name: str
    op: str
    threshold: int | float | str


@dataclass(frozen=True, slots=True)
class Equal:
    """`name = value`, and `refine` too when set: a two-level probe, hash then bisect."""

    name: str
    key: object                     # equality_key of the value
    refine: Range | None = None


@dataclass(frozen=True, slots=True)
class Prefix:
    """`startswith(name, prefix)`, and `refine` too when set."""

    name: str
    prefix: str
    refine: Range | None = None


@dataclass(frozen=True, slots=True)
class Present:
    name: str


Access = Equal | Prefix | Range | Present

_COST: dict[type, int] = {Equal: 1, Range: 32, Prefix: 64, Present: 128}


@dataclass(frozen=True, slots=True)
class Cover:
    accesses: tuple[Access, ...]
    cost: int
    residual: Node | None       # None: true, the cover is exact

    @property
    def exact(self) -> bool:
        return self.residual is None

    @property
    def hits_at_most_once(self) -> bool:
        """True when one event can satisfy at most one access: one access, or equalities on one
        name (an event has one value per name, and equal keys are distinct)."""
        first = self.accesses[0]
        return len(self.accesses) == 1 or all(isinstance(a, Equal) and a.name == first.name for a in self.accesses)


def cover_of(node: Node) -> Cover | None:
    """A cover of the filter `node`, or None when it has none (see the module docstring)."""
    return _cover(node, False)


def _cover(node: Node, negated: bool) -> Cover | None:
    if isinstance(node, Not):
        return _cover(node.operand, not negated)
    if isinstance(node, And | Or):
        children = [_cover(child, negated) for child in node.operands]
        if isinstance(node, Or) != negated:
            return _union(children, Not(node) if negated else node)
        return _cheapest(node.operands, children, negated)
    if negated:
        return None
    return _atom_cover(node)


def _cheapest(operands: tuple[Node, ...], children: list[Cover | None], negated: bool) -> Cover | None:
    """The cover of an all-of: one operand's, refined by a range operand when it can be."""
    refined = None if negated else _refined(operands, children)
    if refined is None:
        cheapest = _cheapest_index(children)
        if cheapest is None:
            return None
        refined = (cheapest, -1, children[cheapest].accesses)  # type: ignore[union-attr]
    best, skip, accesses = refined
    chosen = children[best]
    assert chosen is not None
    rest: list[Node] = []
    for i, operand in enumerate(operands):
        if i == best:
            if chosen.residual is not None:
                rest.append(chosen.residual)
        elif i != skip:     # the refining range is enforced by the probe itself
            rest.append(Not(operand) if negated else operand)
    residual = None if not rest else rest[0] if len(rest) == 1 else And(tuple(rest))
    return Cover(accesses, chosen.cost, residual)


def _cheapest_index(children: list[Cover | None]) -> int | None:
    best: Cover | None = None
    index = None
    for i, child in enumerate(children):
        if child is not None and (best is None or child.cost < best.cost):
            best, index = child, i
    return index


def _refined(operands: tuple[Node, ...], children: list[Cover | None]) -> tuple[int, int, tuple[Access, ...]] | None:
    """(chosen operand, refining operand, accesses) for an all-of with a range atom and an
    operand covered by plain equalities or prefixes: `site in (...) and load > 3.5`. Its hits
    are a subset of both operands' hits, so it beats either alone, whatever their costs."""
    skip = next((i for i, op in enumerate(operands)
                 if isinstance(op, Comparison) and op.op in ORDERING_OPS), None)
    if skip is None:
        return None
    best = None
    for i, child in enumerate(children):
        if (i != skip and child is not None and (best is None or child.cost < children[best].cost)  # type: ignore[union-attr]
                and all(isinstance(a, Equal | Prefix) and a.refine is None for a in child.accesses)):
            best = i
    if best is None:
        return None
    atom = operands[skip]
    assert isinstance(atom, Comparison) and not isinstance(atom.value, bool)
    refine = Range(atom.name, atom.op, atom.value)
    accesses = tuple(
        Equal(a.name, a.key, refine) if isinstance(a, Equal) else Prefix(a.name, a.prefix, refine)  # type: ignore[union-attr]
        for a in children[best].accesses  # type: ignore[union-attr]
    )
    return best, skip, accesses


def _union(children: list[Cover | None], written: Node) -> Cover | None:
    seen: dict[Access, None] = {}
    exact = True
    for child in children:
        if child is None:
            return None
        seen.update(dict.fromkeys(child.accesses))
        exact = exact and child.exact
        if len(seen) > ACCESSES_MAX:
            return None
    return _make(tuple(seen), None if exact else written)


def _make(accesses: tuple[Access, ...], residual: Node | None) -> Cover:
    return Cover(accesses, sum(_COST[type(a)] for a in accesses), residual)


def _atom_cover(node: Comparison | Membership | Exists | StartsWith) -> Cover:
    access: Access
    residual: Node | None = None
    if isinstance(node, Comparison):
        if node.op == "=":
            access = Equal(node.name, equality_key(node.value))
        elif node.op in ORDERING_OPS:
            assert not isinstance(node.value, bool), "the parser rejects ordering on booleans"
            access = Range(node.name, node.op, node.value)
        else:
            access, residual = Present(node.name), node
    elif isinstance(node, Membership):
        if node.negated:
            access, residual = Present(node.name), node
        else:
            keys = dict.fromkeys(equality_key(v) for v in node.values)
            return _make(tuple(Equal(node.name, key) for key in keys), None)
    elif isinstance(node, Exists):
        access = Present(node.name)
    else:
        access = Prefix(node.name, node.prefix)
    return _make((access,), residual)


def access_holds(access: Access, attributes: dict[str, object]) -> bool:
    """Whether `attributes` satisfy `access`, by its definition: for tests and for debugging."""
    if access.name not in attributes:
        return False
    value = attributes[access.name]
    if isinstance(access, Present):
        return True
    if isinstance(access, Equal):
        key = equality_key(value)
        hit = key is not None and key == access.key
        return hit and (access.refine is None or access_holds(access.refine, attributes))
    if isinstance(access, Prefix):
        hit = isinstance(value, str) and value.startswith(access.prefix)
        return hit and (access.refine is None or access_holds(access.refine, attributes))
    if value_kind(value) != value_kind(access.threshold):
        return False
    return bool(_ORDER[access.op](value, access.threshold))


_ORDER = {
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
}
