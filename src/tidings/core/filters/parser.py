"""Recursive-descent parser of the filter language, and the `Filter` it returns.

Grammar (keywords in any case; `not` binds tighter than `and`, `and` tighter than `or`):

    filter     := or_expr END
    or_expr    := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | primary
    primary    := "(" or_expr ")"
                | "exists" "(" name ")"
                | "startswith" "(" name "," string ")"
                | name op literal | literal op name
                | name ["not"] "in" "(" literal ("," literal)* ")"
    op         := "=" | "==" | "!=" | "<" | "<=" | ">" | ">="
    literal    := number | string | "true" | "false"

The parser never evaluates anything: it builds a `syntax` tree, which `predicate.compile_node`
turns into closures. A filter comes from an untrusted client, so every resource it can claim is
bounded before any work is done on it (the limits below), and every error is a FilterError whose
position is the offset of the offending character (`len(text)` for an early end).
Chains of one connective are flat (`a and b and c` is one And of three), parentheses are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tidings.core.errors import FilterError
from tidings.core.filters.lexer import END, NAME, NUMBER, OP, PUNCT, STRING, WORD, Token, tokenize
from tidings.core.filters.predicate import compile_node
from tidings.core.filters.syntax import (
    MIRRORED_OP,
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
    unparse,
)

FILTER_TEXT_CHARS_MAX = 4096
NESTING_DEPTH_MAX = 32          # parentheses plus `not`s open at one point
IN_LIST_ITEMS_MAX = 1024
COMPARISONS_MAX = 256           # atoms: comparisons, in-lists, exists(), startswith()


class Filter:
    """A parsed content filter: its source `text`, its syntax tree `ast`, and `matches`."""

    __slots__ = ("_predicate", "ast", "text")

    def __init__(self, text: str, ast: Node) -> None:
        self.text = text
        self.ast = ast
        self._predicate = compile_node(ast)

    @property
    def predicate(self) -> Callable[[Mapping[str, object]], bool]:
        """The compiled closure behind `matches`, for callers that evaluate in a hot loop."""
        return self._predicate

    def matches(self, attributes: Mapping[str, object]) -> bool:
        """True when an event with these attributes passes the filter (see docs/filters.md)."""
        return self._predicate(attributes)

    def canonical(self) -> str:
        return unparse(self.ast)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Filter) and other.ast == self.ast

    def __hash__(self) -> int:
        return hash(self.ast)

    def __repr__(self) -> str:
        return f"Filter({self.text!r})"


def parse_filter(text: str) -> Filter:
    """Parse `text` into a Filter, or raise FilterError(reason, position)."""
    if not isinstance(text, str):
        raise FilterError(f"a filter must be a string, not {type(text).__name__}", 0)
    if len(text) > FILTER_TEXT_CHARS_MAX:
        raise FilterError(f"a filter has at most {FILTER_TEXT_CHARS_MAX} characters", FILTER_TEXT_CHARS_MAX)
    return Filter(text, _Parser(tokenize(text)).parse())


def describe(token: Token) -> str:
    if token.kind == END:
        return "the end of the filter"
    if token.kind == STRING:
        return f"string {token.value!r}"
    if token.kind == NUMBER:
        return f"number {token.value!r}"
    if token.kind == NAME:
        return f"name {token.value!r}"
    return f"'{token.value}'"


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens
        self._i = 0
        self._depth = 0
        self._atoms = 0

    def parse(self) -> Node:
        if self._peek().kind == END:
            raise FilterError("empty filter", self._peek().position)
        node = self._or_expr()
        token = self._peek()
        if token.kind != END:
            raise FilterError(f"unexpected {describe(token)} after a complete expression", token.position)
        return node

    # -- token helpers ---------------------------------------------------------------------------

    def _peek(self, ahead: int = 0) -> Token:
        return self._tokens[min(self._i + ahead, len(self._tokens) - 1)]

    def _next(self) -> Token:
        token = self._tokens[self._i]
        if token.kind != END:
            self._i += 1
        return token

    def _is(self, kind: str, value: Literal, ahead: int = 0) -> bool:
        token = self._peek(ahead)
        return token.kind == kind and token.value == value

    def _expect_punct(self, value: str, what: str) -> Token:
        token = self._peek()
        if token.kind != PUNCT or token.value != value:
            raise FilterError(f"expected {what}, found {describe(token)}", token.position)
        return self._next()

    def _enter(self, token: Token) -> None:
        self._depth += 1
        if self._depth > NESTING_DEPTH_MAX:
            raise FilterError(f"filter nests deeper than {NESTING_DEPTH_MAX} levels", token.position)

    def _count_atom(self, token: Token) -> None:
        self._atoms += 1
        if self._atoms > COMPARISONS_MAX:
            raise FilterError(f"a filter has at most {COMPARISONS_MAX} comparisons", token.position)

    # -- grammar ---------------------------------------------------------------------------------

    def _or_expr(self) -> Node:
        operands = [self._and_expr()]
        while self._is(WORD, "or"):
            self._next()
            operands.append(self._and_expr())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def _and_expr(self) -> Node:
        operands = [self._not_expr()]
        while self._is(WORD, "and"):
            self._next()
            operands.append(self._not_expr())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def _not_expr(self) -> Node:
        if not self._is(WORD, "not"):
            return self._primary()
        self._enter(self._next())
        node = Not(self._not_expr())
        self._depth -= 1
        return node

    def _primary(self) -> Node:
        token = self._peek()
        if token.kind == PUNCT and token.value == "(":
            self._enter(self._next())
            node = self._or_expr()
            self._expect_punct(")", "')'")
            self._depth -= 1
            return node
        if token.kind == NAME and token.bare and self._is(PUNCT, "(", 1):
            function = str(token.value).lower()
            if function == "exists":
                return self._exists()
            if function == "startswith":
                return self._startswith()
            raise FilterError(f"unknown function {token.value!r}", token.position)
        if token.kind == NAME:
            self._count_atom(token)
            return self._predicate_on_name()
        if self._is_literal(token):
            self._count_atom(token)
            return self._comparison_literal_first()
        raise FilterError(f"expected a comparison, '(' or 'not', found {describe(token)}", token.position)

    def _exists(self) -> Node:
        self._count_atom(self._next())
        self._next()  # "("
        name = self._name()
        self._expect_punct(")", "')' closing exists(")
        return Exists(name)

    def _startswith(self) -> Node:
        self._count_atom(self._next())
        self._next()  # "("
        name = self._name()
        self._expect_punct(",", "',' after the attribute name in startswith(")
        token = self._next()
        if token.kind != STRING:
            raise FilterError(f"startswith needs a string prefix, found {describe(token)}", token.position)
        self._expect_punct(")", "')' closing startswith(")
        return StartsWith(name, str(token.value))

    def _name(self) -> str:
        token = self._peek()
        if token.kind != NAME:
            raise FilterError(f"expected an attribute name, found {describe(token)}", token.position)
        self._next()
        return str(token.value)

    def _predicate_on_name(self) -> Node:
        name = str(self._next().value)
        token = self._peek()
        if token.kind == OP:
            op = str(self._next().value)
            return self._comparison(name, op, token, self._literal("a literal after " + repr(op)))
        if self._is(WORD, "in"):
            self._next()
            return Membership(name, self._literal_list())
        if self._is(WORD, "not") and self._is(WORD, "in", 1):
            self._next()
            self._next()
            return Membership(name, self._literal_list(), negated=True)
        raise FilterError(
            f"expected a comparison operator or 'in' after the name {name!r}, found {describe(token)}",
            token.position,
        )

    def _comparison_literal_first(self) -> Node:
        value = self._literal("a literal")
        token = self._peek()
        if token.kind != OP:
            raise FilterError(f"expected a comparison operator, found {describe(token)}", token.position)
        self._next()
        name_token = self._peek()
        if name_token.kind != NAME:
            raise FilterError(
                f"a comparison needs an attribute name on one side, found {describe(name_token)}",
                name_token.position,
            )
        self._next()
        return self._comparison(str(name_token.value), MIRRORED_OP[str(token.value)], token, value)

    def _comparison(self, name: str, op: str, op_token: Token, value: Literal) -> Node:
        if isinstance(value, bool) and op in ORDERING_OPS:
            raise FilterError(f"booleans compare only with = and !=, not {op_token.value}", op_token.position)
        return Comparison(name, op, value)

    @staticmethod
    def _is_literal(token: Token) -> bool:
        return token.kind in (NUMBER, STRING) or (token.kind == WORD and token.value in ("true", "false"))

    def _literal(self, what: str) -> Literal:
        token = self._peek()
        if not self._is_literal(token):
            hint = " (attributes compare only with literals)" if token.kind == NAME else ""
            raise FilterError(f"expected {what}, found {describe(token)}{hint}", token.position)
        self._next()
        if token.kind == WORD:
            return token.value == "true"
        return token.value

    def _literal_list(self) -> tuple[Literal, ...]:
        self._expect_punct("(", "'(' opening the list after 'in'")
        if self._is(PUNCT, ")"):
            raise FilterError("an 'in' list needs at least one value", self._peek().position)
        values = [self._literal("a literal in the 'in' list")]
        while self._is(PUNCT, ","):
            self._next()
            if len(values) >= IN_LIST_ITEMS_MAX:
                raise FilterError(f"an 'in' list has at most {IN_LIST_ITEMS_MAX} values", self._peek().position)
            values.append(self._literal("a literal in the 'in' list"))
        self._expect_punct(")", "',' or ')' in the 'in' list")
        return tuple(values)
