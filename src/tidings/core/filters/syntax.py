"""The syntax tree of a content filter, and its canonical text.

A filter is a boolean expression over the attributes of one event (Gryphon's content filters,
GES's "attribute predicates"). The tree has four kinds of leaves, the *atoms*:

    Comparison(name, op, value)     load > 3.5       op is one of = != < <= > >=
    Membership(name, values, neg)   site in ("a", "b"), site not in (...)
    Exists(name)                    exists(kernel)
    StartsWith(name, prefix)        startswith(kernel, "2.6")

and three connectives, `And` and `Or` (n-ary, two or more operands) and `Not`. The parser builds
these nodes and nothing else builds them from user text, so every tree obeys the invariants:

- a Comparison's op is canonical (`==` became `=`, a literal on the left was moved to the right
  with the operator mirrored), and an ordering op (< <= > >=) never has a boolean value;
- a Membership list is non-empty;
- a StartsWith prefix is a string.

Nodes are frozen and compare by value, so a test can hold a parsed tree against an expected one.
`unparse(node)` writes canonical text that parses back to an equal tree: it is what a filter
summary, a log line or an error message shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Literal = str | int | float | bool

ORDERING_OPS = ("<", "<=", ">", ">=")
COMPARISON_OPS = ("=", "!=", *ORDERING_OPS)
# `3 < x` means `x > 3`: the operator seen from the attribute's side.
MIRRORED_OP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

# Words that cannot be bare attribute names (use backquotes). `exists` and `startswith` are
# functions only when a `(` follows, so they stay usable as names.
RESERVED_WORDS = frozenset({"and", "or", "not", "in", "true", "false"})
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def literal_key(value: Literal) -> tuple[str, Literal]:
    """`value` with its type: `True == 1 == 1.0` in Python, but not in a filter's tree."""
    return (type(value).__name__, value)


@dataclass(frozen=True, slots=True, eq=False)
class Comparison:
    name: str
    op: str
    value: Literal

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Comparison) and self.name == other.name and self.op == other.op
            and literal_key(self.value) == literal_key(other.value)
        )

    def __hash__(self) -> int:
        return hash((self.name, self.op, literal_key(self.value)))


@dataclass(frozen=True, slots=True, eq=False)
class Membership:
    name: str
    values: tuple[Literal, ...]
    negated: bool = False

    def _key(self) -> tuple[object, ...]:
        return (self.name, self.negated, tuple(literal_key(v) for v in self.values))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Membership) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, slots=True)
class Exists:
    name: str


@dataclass(frozen=True, slots=True)
class StartsWith:
    name: str
    prefix: str


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


Atom = Comparison | Membership | Exists | StartsWith
Node = Comparison | Membership | Exists | StartsWith | And | Or | Not


# Binding strength, for parentheses in unparse: or < and < not < atom.
_STRENGTH = {Or: 1, And: 2, Not: 3}


def unparse(node: Node) -> str:
    """Canonical text of `node`; `parse_filter(unparse(n)).ast == n` for every parsed tree."""
    if isinstance(node, Comparison):
        return f"{unparse_name(node.name)} {node.op} {unparse_literal(node.value)}"
    if isinstance(node, Membership):
        items = ", ".join(unparse_literal(v) for v in node.values)
        word = "not in" if node.negated else "in"
        return f"{unparse_name(node.name)} {word} ({items})"
    if isinstance(node, Exists):
        return f"exists({unparse_name(node.name)})"
    if isinstance(node, StartsWith):
        return f"startswith({unparse_name(node.name)}, {unparse_literal(node.prefix)})"
    if isinstance(node, Not):
        return f"not {_operand_text(node.operand, 3)}"
    word = " and " if isinstance(node, And) else " or "
    strength = _STRENGTH[type(node)]
    # An operand as strong as its parent still gets parentheses: the parser builds flat chains,
    # so a nested And inside an And can only have come from parentheses.
    return word.join(_operand_text(child, strength + 1) for child in node.operands)


def _operand_text(node: Node, strength_min: int) -> str:
    text = unparse(node)
    if _STRENGTH.get(type(node), 4) < strength_min:
        return f"({text})"
    return text


def unparse_name(name: str) -> str:
    if NAME_RE.fullmatch(name) and name.lower() not in RESERVED_WORDS:
        return name
    return "`" + _escape(name, "`") + "`"


def unparse_literal(value: Literal) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + _escape(value, '"') + '"'


def _escape(text: str, quote: str) -> str:
    out: list[str] = []
    for ch in text:
        if ch in ("\\", quote):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)
