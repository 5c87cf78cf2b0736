"""Tokens of the filter language.

`tokenize(text)` cuts the whole text into a list of tokens ending with one END token, each
carrying the 0-based offset of its first character, so the parser can point a FilterError at the
exact place. The lexer alone decides what a literal means:

- numbers: `-?digits`, an int; with a fraction (`1.5`) and/or an exponent (`2e-3`), a float.
  A float literal must be finite (`1e999` is an error, not infinity).
- strings: double or single quotes, escapes `\\ \" \' \n \t \\uXXXX`; a `\\uXXXX` high
  surrogate followed by a `\\uXXXX` low surrogate is one character, as in JSON.
- names: `[A-Za-z_][A-Za-z0-9_.]*`, or anything between backquotes (same escapes, plus a
  backquote). A bare word in RESERVED_WORDS (any case) is a keyword, never a name.

Invariants: a token's `position` indexes `text`; only the END token has position `len(text)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tidings.core.errors import FilterError
from tidings.core.filters.syntax import RESERVED_WORDS, Literal

NAME = "name"          # bare or backquoted attribute name (value: the name)
WORD = "word"          # keyword and/or/not/in/true/false (value: lowercased)
NUMBER = "number"      # value: int or float
STRING = "string"      # value: str
OP = "op"              # value: one of = == != < <= > >=
PUNCT = "punct"        # value: ( ) ,
END = "end"

_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_REST = _NAME_START | frozenset("0123456789.")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_SPACE = frozenset(" \t\r\n")
_SIMPLE_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t"}
_OPS = ("==", "!=", "<=", ">=", "=", "<", ">")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    value: Literal
    position: int
    bare: bool = True   # False for a backquoted name: never a keyword or function


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch in _SPACE:
            i += 1
        elif ch in "(),":
            tokens.append(Token(PUNCT, ch, i))
            i += 1
        elif ch in "=!<>":
            i = _read_op(text, i, tokens)
        elif ch in _DIGITS or (ch == "-" and i + 1 < n and text[i + 1] in _DIGITS):
            i = _read_number(text, i, tokens)
        elif ch in "\"'":
            value, end = read_quoted(text, i)
            tokens.append(Token(STRING, value, i))
            i = end
        elif ch == "`":
            value, end = read_quoted(text, i)
            if not value:
                raise FilterError("empty attribute name", i)
            tokens.append(Token(NAME, value, i, bare=False))
            i = end
        elif ch in _NAME_START:
            i = _read_word(text, i, tokens)
        else:
            raise FilterError(f"unexpected character {ch!r}", i)
    tokens.append(Token(END, "", n))
    return tokens


def bare_name(name: str) -> bool:
    """Whether a filter can name the attribute `name` as it is, without backquotes."""
    return (bool(name) and name[0] in _NAME_START and all(c in _NAME_REST for c in name)
            and name.lower() not in RESERVED_WORDS)


def _read_word(text: str, start: int, tokens: list[Token]) -> int:
    end = start + 1
    while end < len(text) and text[end] in _NAME_REST:
        end += 1
    word = text[start:end]
    if word.lower() in RESERVED_WORDS:
        tokens.append(Token(WORD, word.lower(), start))
    else:
        tokens.append(Token(NAME, word, start))
    return end


def _read_op(text: str, i: int, tokens: list[Token]) -> int:
    for op in _OPS:
        if text.startswith(op, i):
            tokens.append(Token(OP, "=" if op == "==" else op, i))
            return i + len(op)
    raise FilterError("'!' must be followed by '=' (did you mean 'not'?)", i)


def _read_number(text: str, start: int, tokens: list[Token]) -> int:
    n = len(text)
    i = start + 1 if text[start] == "-" else start
    i = _skip_digits(text, i)
    is_float = False
    if i < n and text[i] == ".":
        if i + 1 >= n or text[i + 1] not in _DIGITS:
            raise FilterError("expected a digit after the decimal point", i + 1)
        i = _skip_digits(text, i + 1)
        is_float = True
    if i < n and text[i] in "eE":
        j = i + 1
        if j < n and text[j] in "+-":
            j += 1
        if j >= n or text[j] not in _DIGITS:
            raise FilterError("expected a digit in the exponent", j)
        i = _skip_digits(text, j)
        is_float = True
    if i < n and text[i] in _NAME_REST:
        raise FilterError(f"unexpected character {text[i]!r} in a number", i)
    literal = text[start:i]
    value: int | float
    if is_float:
        value = float(literal)
        if not math.isfinite(value):
            raise FilterError("number out of range", start)
    else:
        value = int(literal)
    tokens.append(Token(NUMBER, value, start))
    return i


def _skip_digits(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _DIGITS:
        i += 1
    return i


def read_quoted(text: str, start: int) -> tuple[str, int]:
    """Read the quoted text opening at `start`; return its value and the offset after it."""
    quote = text[start]
    out: list[str] = []
    i = start + 1
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= n:
            break
        esc = text[i + 1]
        if esc in _SIMPLE_ESCAPES or esc == quote:
            out.append(_SIMPLE_ESCAPES.get(esc, esc))
            i += 2
        elif esc == "u":
            code = _hex4(text, i)
            i += 6
            if 0xD800 <= code <= 0xDBFF and text.startswith("\\u", i):
                low = _hex4(text, i)
                if 0xDC00 <= low <= 0xDFFF:
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
            out.append(chr(code))
        else:
            raise FilterError(f"unknown escape \\{esc}", i)
    what = "attribute name" if quote == "`" else "string"
    raise FilterError(f"unterminated {what}", start)


def _hex4(text: str, backslash: int) -> int:
    digits = text[backslash + 2:backslash + 6]
    if len(digits) != 4 or not all(c in _HEX for c in digits):
        raise FilterError("\\u must be followed by four hex digits", backslash)
    return int(digits, 16)
