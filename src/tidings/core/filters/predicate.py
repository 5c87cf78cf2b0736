"""Compile a filter's syntax tree into nested Python closures.

`compile_node(node)` returns `predicate(attributes) -> bool`. Each atom becomes one small
closure holding its attribute name and literal in cells, each connective a closure over its
operands' closures, so evaluating a filter is a handful of Python calls with no tree walk and no
`eval`. `and`/`or` short-circuit left to right.

Semantics (docs/filters.md is the user's version). Values fall into three kinds: *number* (int or
float, never bool), *string* and *boolean*; anything else has no kind and matches no atom but
`exists`.

- An atom on a missing attribute is false; `exists(name)` tests presence only.
- `=`/`!=`/ordering compare within a kind: numbers numerically (1 = 1.0), strings by code point,
  booleans with `=` and `!=` only. A value of another kind makes the atom false, so `a != v` is
  true only when `a` is present, of v's kind and different.
- `a in (...)` is true when `a` equals a listed value (same rule as `=`). `a not in (...)` is true
  when `a` is present, of the kind of at least one listed value, and equal to none of them; for a
  one-value list it is exactly `a != v`.
- `startswith(a, p)` is true when `a` is a string starting with `p`.
- `not X` is plain negation: `not (a = 1)` is true when `a` is missing.

Invariant: every closure returns a bool and never raises for values of built-in types, even
those outside the attribute types (None, lists).
`value_kind` is the one classification the index shares, so both agree on what equals what.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tidings.core.filters.syntax import (
    And,
    Comparison,
    Exists,
    Literal,
    Membership,
    Node,
    Not,
    StartsWith,
)

Predicate = Callable[[Mapping[str, object]], bool]

NUMBER = 0
STRING = 1
BOOLEAN = 2
NO_KIND = 3

_NUMERIC = (int, float)


def value_kind(value: object) -> int:
    if isinstance(value, str):
        return STRING
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, _NUMERIC):
        return NUMBER
    return NO_KIND


def compile_node(node: Node) -> Predicate:
    if isinstance(node, Comparison):
        return _compile_comparison(node)
    if isinstance(node, Membership):
        return _compile_membership(node)
    if isinstance(node, Exists):
        return _compile_exists(node.name)
    if isinstance(node, StartsWith):
        return _compile_startswith(node.name, node.prefix)
    if isinstance(node, Not):
        return _compile_not(node.operand)
    operands = [compile_node(child) for child in node.operands]
    return _compile_and(operands) if isinstance(node, And) else _compile_or(operands)


def _compile_exists(name: str) -> Predicate:
    return lambda a: name in a


def _compile_not(operand: Node) -> Predicate:
    # One closure, not two, for the negations a cover leaves as residuals (`not startswith(...)`).
    if isinstance(operand, StartsWith):
        name, prefix = operand.name, operand.prefix
        return lambda a: not (isinstance(v := a.get(name), str) and v.startswith(prefix))
    if isinstance(operand, Exists):
        name = operand.name
        return lambda a: name not in a
    inner = compile_node(operand)
    return lambda a: not inner(a)


def _compile_and(operands: list[Predicate]) -> Predicate:
    if len(operands) == 2:
        first, second = operands
        return lambda a: first(a) and second(a)
    if len(operands) == 3:
        first, second, third = operands
        return lambda a: first(a) and second(a) and third(a)
    frozen = tuple(operands)
    return lambda a: all(operand(a) for operand in frozen)


def _compile_or(operands: list[Predicate]) -> Predicate:
    if len(operands) == 2:
        first, second = operands
        return lambda a: first(a) or second(a)
    if len(operands) == 3:
        first, second, third = operands
        return lambda a: first(a) or second(a) or third(a)
    frozen = tuple(operands)
    return lambda a: any(operand(a) for operand in frozen)


def _compile_startswith(name: str, prefix: str) -> Predicate:
    def startswith(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, str) and v.startswith(prefix)

    return startswith


def _compile_comparison(node: Comparison) -> Predicate:
    name, op, lit = node.name, node.op, node.value
    if isinstance(lit, bool):
        # Only = and != reach here (the parser rejects ordering on booleans).
        wanted = lit if op == "=" else not lit
        return lambda a: a.get(name) is wanted
    if isinstance(lit, str):
        return _STRING_OPS[op](name, lit)
    return _NUMBER_OPS[op](name, lit)


def _is_number(v: object) -> bool:
    return isinstance(v, _NUMERIC) and type(v) is not bool


# One maker per (kind, op): the fast path is a type check and one comparison, nothing else.
# Numbers: `isinstance(v, (int, float)) and type(v) is not bool` keeps True away from 1.

def _num_eq(name: str, lit: Literal) -> Predicate:
    def num_eq(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return v == lit and _is_number(v)

    return num_eq


def _num_ne(name: str, lit: Literal) -> Predicate:
    def num_ne(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, _NUMERIC) and type(v) is not bool and v != lit

    return num_ne


def _num_lt(name: str, lit: Literal) -> Predicate:
    def num_lt(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, _NUMERIC) and type(v) is not bool and v < lit  # type: ignore[operator]

    return num_lt


def _num_le(name: str, lit: Literal) -> Predicate:
    def num_le(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, _NUMERIC) and type(v) is not bool and v <= lit  # type: ignore[operator]

    return num_le


def _num_gt(name: str, lit: Literal) -> Predicate:
    def num_gt(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, _NUMERIC) and type(v) is not bool and v > lit  # type: ignore[operator]

    return num_gt


def _num_ge(name: str, lit: Literal) -> Predicate:
    def num_ge(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, _NUMERIC) and type(v) is not bool and v >= lit  # type: ignore[operator]

    return num_ge


def _str_eq(name: str, lit: Literal) -> Predicate:
    def str_eq(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return v == lit and isinstance(v, str)

    return str_eq


def _str_ne(name: str, lit: Literal) -> Predicate:
    def str_ne(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, str) and v != lit

    return str_ne


def _str_lt(name: str, lit: Literal) -> Predicate:
    def str_lt(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, str) and v < lit  # type: ignore[operator]

    return str_lt


def _str_le(name: str, lit: Literal) -> Predicate:
    def str_le(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, str) and v <= lit  # type: ignore[operator]

    return str_le


def _str_gt(name: str, lit: Literal) -> Predicate:
    def str_gt(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, str) and v > lit  # type: ignore[operator]

    return str_gt


def _str_ge(name: str, lit: Literal) -> Predicate:
    def str_ge(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        return isinstance(v, str) and v >= lit  # type: ignore[operator]

    return str_ge


_NUMBER_OPS: dict[str, Callable[[str, Literal], Predicate]] = {
    "=": _num_eq, "!=": _num_ne, "<": _num_lt, "<=": _num_le, ">": _num_gt, ">=": _num_ge,
}
_STRING_OPS: dict[str, Callable[[str, Literal], Predicate]] = {
    "=": _str_eq, "!=": _str_ne, "<": _str_lt, "<=": _str_le, ">": _str_gt, ">=": _str_ge,
}


def split_by_kind(values: tuple[Literal, ...]) -> tuple[frozenset[object], frozenset[object], frozenset[object]]:
    """The listed values as (numbers, strings, booleans); 1 and 1.0 become one number."""
    numbers = frozenset(v for v in values if value_kind(v) == NUMBER)
    strings = frozenset(v for v in values if isinstance(v, str))
    booleans = frozenset(v for v in values if isinstance(v, bool))
    return numbers, strings, booleans


def _compile_membership(node: Membership) -> Predicate:
    name = node.name
    numbers, strings, booleans = split_by_kind(node.values)
    if not node.negated:
        if not numbers and not booleans:
            # The common case, a list of strings (site in ("a", "b")).
            return lambda a: isinstance(v := a.get(name), str) and v in strings

        def member(a: Mapping[str, object]) -> bool:
            v = a.get(name)
            if isinstance(v, str):
                return v in strings
            if isinstance(v, bool):
                return v in booleans
            return isinstance(v, _NUMERIC) and v in numbers

        return member

    def non_member(a: Mapping[str, object]) -> bool:
        v = a.get(name)
        if isinstance(v, str):
            return bool(strings) and v not in strings
        if isinstance(v, bool):
            return bool(booleans) and v not in booleans
        return isinstance(v, _NUMERIC) and bool(numbers) and v not in numbers

    return non_member
