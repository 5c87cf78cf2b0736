"""The filter language: each construct, precedence, every error and its position, the limits, and
the compiled closures against the reference evaluator."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tidings.core.errors import FilterError
from tidings.core.filters import Filter, parse_filter
from tidings.core.filters.parser import (
    COMPARISONS_MAX,
    FILTER_TEXT_CHARS_MAX,
    IN_LIST_ITEMS_MAX,
    NESTING_DEPTH_MAX,
)
from tidings.core.filters.syntax import (
    And,
    Comparison,
    Exists,
    Membership,
    Node,
    Not,
    Or,
    StartsWith,
    unparse,
)

from .filter_reference import attribute_maps, evaluate, odd_attribute_maps, trees

A1 = Comparison("a", "=", 1)
B2 = Comparison("b", "=", 2)
C3 = Comparison("c", "=", 3)


def tree(text: str) -> Node:
    return parse_filter(text).ast


# -- constructs ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("x = 1", Comparison("x", "=", 1)),
    ("x == 1", Comparison("x", "=", 1)),
    ('x != "a"', Comparison("x", "!=", "a")),
    ("x < 1.5", Comparison("x", "<", 1.5)),
    ("x <= -2", Comparison("x", "<=", -2)),
    ("x > 1e3", Comparison("x", ">", 1000.0)),
    ("x >= -1.5E-2", Comparison("x", ">=", -0.015)),
    ("x>=-1.5e+2", Comparison("x", ">=", -150.0)),
    ("x = -0", Comparison("x", "=", 0)),
    ("x = 007", Comparison("x", "=", 7)),
    ("x = 123456789012345678901234567890", Comparison("x", "=", 123456789012345678901234567890)),
    ("x = true", Comparison("x", "=", True)),
    ("x != FALSE", Comparison("x", "!=", False)),
    ("3 < price", Comparison("price", ">", 3)),
    ("3 <= price", Comparison("price", ">=", 3)),
    ("3 > price", Comparison("price", "<", 3)),
    ("3 >= price", Comparison("price", "<=", 3)),
    ('"NY" == loc', Comparison("loc", "=", "NY")),
    ("True != flag", Comparison("flag", "!=", True)),
    ('x in (1, "a", true, 2.5)', Membership("x", (1, "a", True, 2.5))),
    ("x not in (1)", Membership("x", (1,), negated=True)),
    ("x NOT IN (1)", Membership("x", (1,), negated=True)),
    ("not x in (1)", Not(Membership("x", (1,)))),
    ("exists(a)", Exists("a")),
    ("EXISTS ( a )", Exists("a")),
    ('startswith(k, "2.6")', StartsWith("k", "2.6")),
    ("StartsWith(k,'2.6')", StartsWith("k", "2.6")),
    ("a.b_c9 = 1", Comparison("a.b_c9", "=", 1)),
    ("_x = 1", Comparison("_x", "=", 1)),
    ("`odd name` = 1", Comparison("odd name", "=", 1)),
    ("`and` = 1", Comparison("and", "=", 1)),
    ("`a\\`b` = 1", Comparison("a`b", "=", 1)),
    ("exists = 1", Comparison("exists", "=", 1)),
    ('startswith > "a"', Comparison("startswith", ">", "a")),
    ("exists(`exists`)", Exists("exists")),
    ("exists in (1)", Membership("exists", (1,))),
])
def test_constructs(text: str, expected: Node) -> None:
    assert tree(text) == expected


@pytest.mark.parametrize(("text", "value"), [
    (r'x = "a\\b"', "a\\b"),
    (r'x = "a\"b"', 'a"b'),
    (r"x = 'a\'b'", "a'b"),
    (r"""x = 'a"b'""", 'a"b'),
    (r'''x = "a'b"''', "a'b"),
    (r'x = "a\'b"', "a'b"),
    (r'x = "a\nb\tc"', "a\nb\tc"),
    (r'x = "\u00e9\u00E9"', "éé"),
    (r'x = "\ud83d\ude00"', "\U0001f600"),
    (r'x = "\ud83d"', "\ud83d"),
    (r'x = "\ud83dx"', "\ud83dx"),
    ('x = "raw\nnewline"', "raw\nnewline"),
    ('x = ""', ""),
    ('x = "é😀"', "é😀"),
])
def test_string_literals(text: str, value: str) -> None:
    node = tree(text)
    assert isinstance(node, Comparison)
    assert node.value == value


def test_literal_types_are_kept() -> None:
    assert tree("x = 1") != tree("x = 1.0")
    assert tree("x = 1") != tree("x = true")
    assert tree("x in (1)") != tree("x in (true)")
    assert isinstance(tree("x = 1e2"), Comparison)
    assert type(tree("x = 1e2").value) is float  # type: ignore[union-attr]
    assert parse_filter("x = 1") == parse_filter(" x == 1 ")
    assert parse_filter("x = 1") != parse_filter("x = true")
    assert hash(parse_filter("x = 1")) == hash(parse_filter("x==1"))


def test_keywords_in_any_case_and_whitespace() -> None:
    assert tree("a = 1 AND b = 2\tOr\nNOT c = 3") == Or((And((A1, B2)), Not(C3)))


def test_filter_object() -> None:
    flt = parse_filter("a = 1 and b = 2")
    assert flt.text == "a = 1 and b = 2"
    assert flt.ast == And((A1, B2))
    assert flt.canonical() == "a = 1 and b = 2"
    assert flt.matches({"a": 1, "b": 2}) is True
    assert flt.predicate({"a": 1}) is False
    assert repr(flt) == "Filter('a = 1 and b = 2')"
    assert isinstance(flt, Filter)


# -- precedence: not > and > or; chains are flat, parentheses kept ------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("a = 1 or b = 2 and c = 3", Or((A1, And((B2, C3))))),
    ("a = 1 and b = 2 or c = 3", Or((And((A1, B2)), C3))),
    ("not a = 1 and b = 2", And((Not(A1), B2))),
    ("not a = 1 or b = 2", Or((Not(A1), B2))),
    ("not (a = 1 and b = 2)", Not(And((A1, B2)))),
    ("(a = 1 or b = 2) and c = 3", And((Or((A1, B2)), C3))),
    ("a = 1 and b = 2 and c = 3", And((A1, B2, C3))),
    ("a = 1 or b = 2 or c = 3", Or((A1, B2, C3))),
    ("a = 1 and (b = 2 and c = 3)", And((A1, And((B2, C3))))),
    ("not not a = 1", Not(Not(A1))),
    ("((a = 1))", A1),
])
def test_precedence(text: str, expected: Node) -> None:
    assert tree(text) == expected


# -- errors and their positions -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "position", "reason"), [
    ("", 0, "empty filter"),
    ("   ", 3, "empty filter"),
    ("x", 1, "expected a comparison operator or 'in'"),
    ("x =", 3, "expected a literal after '='"),
    ("x = y", 4, "attributes compare only with literals"),
    ("1 = 2", 4, "attribute name on one side"),
    ("3 x", 2, "expected a comparison operator"),
    ("x = 1 y = 2", 6, "after a complete expression"),
    ("x = 1)", 5, "after a complete expression"),
    ("(x = 1", 6, "expected ')'"),
    ("(x = 1 or (y = 2)", 17, "expected ')'"),
    ("x in ()", 6, "at least one value"),
    ("x in (1,", 8, "expected a literal in the 'in' list"),
    ("x in (1,)", 8, "expected a literal in the 'in' list"),
    ("x in (1 2)", 8, "',' or ')'"),
    ("x in 1", 5, "'(' opening the list"),
    ("x in (y)", 6, "expected a literal"),
    ("x not y", 2, "expected a comparison operator or 'in'"),
    ('x = "abc', 4, "unterminated string"),
    ("x = 'abc\\'", 4, "unterminated string"),
    ('x = "abc\\', 4, "unterminated string"),
    ('x = "\\q"', 5, "unknown escape \\q"),
    ('x = "ab\\u12"', 7, "four hex digits"),
    ('x = "\\u12g4"', 5, "four hex digits"),
    ("`abc = 1", 0, "unterminated attribute name"),
    ("`` = 1", 0, "empty attribute name"),
    ("x = 1.", 6, "digit after the decimal point"),
    ("x = 1.e5", 6, "digit after the decimal point"),
    ("x = 1e", 6, "digit in the exponent"),
    ("x = 1e+", 7, "digit in the exponent"),
    ("x = 3abc", 5, "in a number"),
    ("x = 1.5.2", 7, "in a number"),
    ("x = 1e999", 4, "number out of range"),
    ("x ! 1", 2, "'!' must be followed by '='"),
    ("x = 1 & y = 2", 6, "unexpected character '&'"),
    ("- 3 < x", 0, "unexpected character '-'"),
    ("x = -", 4, "unexpected character '-'"),
    ("x = 1 ; y", 6, "unexpected character ';'"),
    ("x < true", 2, "booleans compare only with = and !="),
    ("false >= x", 6, "booleans compare only with = and !="),
    ("exists(1)", 7, "expected an attribute name"),
    ("exists(x", 8, "')' closing exists("),
    ("exists(x, y)", 8, "')' closing exists("),
    ("startswith(x, 1)", 14, "startswith needs a string prefix"),
    ("startswith(x, y)", 14, "startswith needs a string prefix"),
    ("startswith(x)", 12, "','"),
    ('startswith(x, "a"', 17, "')' closing startswith("),
    ("foo(x)", 0, "unknown function 'foo'"),
    ("`exists`(x)", 8, "expected a comparison operator"),
    ("and", 0, "expected a comparison, '(' or 'not'"),
    ("x = 1 and", 9, "found the end of the filter"),
    ("x = 1 or or y = 2", 9, "found 'or'"),
    ("not", 3, "expected a comparison"),
    ("()", 1, "expected a comparison"),
    ("x = 1 not", 6, "after a complete expression"),
    ("x = (1)", 4, "expected a literal"),
])
def test_errors_point_at_the_offending_character(text: str, position: int, reason: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    assert info.value.position == position, info.value
    assert reason in info.value.reason, info.value
    assert info.value.code == "bad-filter"
    assert str(info.value).endswith(f"at position {position}")


def test_a_non_string_is_an_error() -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(42)  # type: ignore[arg-type]
    assert info.value.position == 0


# -- limits ----------------------------------------------------------------------------------------------

def test_text_length_limit() -> None:
    body = "x = " + '"' + "a" * (FILTER_TEXT_CHARS_MAX - 6) + '"'
    assert len(body) == FILTER_TEXT_CHARS_MAX
    parse_filter(body)
    with pytest.raises(FilterError) as info:
        parse_filter(body + " ")
    assert info.value.position == FILTER_TEXT_CHARS_MAX


def test_nesting_limit_parentheses() -> None:
    depth = NESTING_DEPTH_MAX
    assert tree("(" * depth + "x = 1" + ")" * depth) == Comparison("x", "=", 1)
    with pytest.raises(FilterError) as info:
        parse_filter("(" * (depth + 1) + "x = 1" + ")" * (depth + 1))
    assert info.value.position == depth
    assert "deeper than 32" in info.value.reason


def test_nesting_limit_counts_not_and_parentheses_together() -> None:
    depth = NESTING_DEPTH_MAX
    parse_filter("not " * depth + "x = 1")
    with pytest.raises(FilterError) as info:
        parse_filter("not " * (depth + 1) + "x = 1")
    assert info.value.position == 4 * depth
    with pytest.raises(FilterError) as info:
        parse_filter("not (" * 16 + "not x = 1" + ")" * 16)
    assert info.value.position == 5 * 16
    # Sibling groups do not add up: depth is what is open at one point.
    parse_filter(" and ".join(["(" * 20 + "x = 1" + ")" * 20] * 3))


def test_in_list_limit() -> None:
    items = ",".join(str(i % 10) for i in range(IN_LIST_ITEMS_MAX))
    node = tree(f"x in ({items})")
    assert isinstance(node, Membership)
    assert len(node.values) == IN_LIST_ITEMS_MAX
    text = f"x in ({items},99999)"
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    assert info.value.position == text.index("99999")


def test_comparison_limit() -> None:
    atoms = [f"a{i} = 1" if i % 4 else f"exists(a{i})" for i in range(COMPARISONS_MAX)]
    parse_filter(" or ".join(atoms))
    text = " or ".join([*atoms, "9 < z"])
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    assert info.value.position == text.index("9 < z")
    assert "at most 256 comparisons" in info.value.reason


# -- properties --------------------------------------------------------------------------------------

def _parsed(node: Node) -> Filter:
    try:
        return parse_filter(unparse(node))
    except FilterError as exc:
        assume("deeper" not in exc.reason)
        raise


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_unparse_parses_back_to_the_same_tree(node: Node) -> None:
    flt = _parsed(node)
    assert flt.ast == node
    assert flt.canonical() == unparse(node)


@settings(max_examples=350, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, st.lists(attribute_maps, min_size=1, max_size=6), odd_attribute_maps)
def test_compiled_closures_agree_with_the_reference(
    node: Node, events: list[dict[str, object]], odd: dict[str, object],
) -> None:
    flt = _parsed(node)
    for attributes in [*events, odd]:
        result = flt.matches(attributes)
        assert type(result) is bool
        assert result == evaluate(node, attributes), (unparse(node), attributes)


_TOKENS = ["x", "y", "`n m`", "=", "==", "!=", "<", "<=", ">", ">=", "(", ")", ",", "and", "or", "not",
           "in", "exists", "startswith", "true", "1", "-2.5", "1e3", '"s"', "'t'", '"\\u00e9"', "!", "-",
           '"', "`", "\\", "1.", "é", " "]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.sampled_from(_TOKENS), max_size=12).map(" ".join), st.text(max_size=30)))
def test_any_text_parses_or_raises_filter_error_inside_the_text(text: str) -> None:
    try:
        flt = parse_filter(text)
    except FilterError as exc:
        assert 0 <= exc.position <= len(text)
    else:
        assert parse_filter(flt.canonical()) == flt
