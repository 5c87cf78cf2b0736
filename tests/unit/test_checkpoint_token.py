"""Checkpoint tokens: round trips, clear errors for anything mangled, and the moves a token makes."""

import base64
import contextlib
import struct
import zlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.durable.token import (
    PUBEND_ID_BYTES_MAX,
    TICK_MAX,
    TOKEN_CHARS_MAX,
    TOKEN_PUBENDS_MAX,
    CheckpointToken,
    TokenError,
    decode,
)

pubends = st.text(min_size=1, max_size=16).filter(lambda s: len(s.encode()) <= PUBEND_ID_BYTES_MAX)
ticks = st.integers(min_value=0, max_value=TICK_MAX)
tokens = st.builds(CheckpointToken.start, ticks, st.dictionaries(pubends, ticks, max_size=12))


def _forge(body: object, version: str = "tk1.") -> str:
    raw = msgpack.packb(body)
    raw += struct.pack(">I", zlib.crc32(raw))
    return version + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@given(tokens)
def test_round_trip_is_exact_printable_and_canonical(token):
    text = token.encode()
    assert text.isprintable() and " " not in text and len(text) <= TOKEN_CHARS_MAX
    assert decode(text) == token
    assert decode(f"  {text}\n") == token  # read back from a file with its newline
    assert CheckpointToken.start(token.default_tick, token.as_dict()).encode() == text


@given(tokens, st.data())
def test_any_single_character_change_is_a_clear_error_or_the_same_token(token, data):
    text = token.encode()
    i = data.draw(st.integers(min_value=0, max_value=len(text) - 1))
    c = data.draw(st.sampled_from("ABCabc019-_.=+/!~"))
    mangled = text[:i] + c + text[i + 1:]
    with contextlib.suppress(TokenError):
        assert decode(mangled) == token  # only base64 padding bits can change without effect


@given(tokens, st.integers(min_value=1, max_value=40))
def test_a_cut_token_is_refused(token, cut):
    text = token.encode()
    if cut < len(text) - 4:
        with pytest.raises(TokenError):
            decode(text[:-cut])


@given(st.text(max_size=200) | st.binary(max_size=100).map(lambda b: "tk1." + b.hex()))
def test_garbage_is_a_token_error(text):
    with pytest.raises(TokenError):
        decode(text)


@pytest.mark.parametrize(("text", "says"), [
    ("", "not a checkpoint token"),
    ("hello", "not a checkpoint token"),
    ("tk2.AAAA", "version 'tk2' is not supported"),
    ("tk1.@@@@", "base64"),
    ("tk1.AA", "too short"),
    (_forge([1, {}])[:-2] + "AA", "checksum"),
    (_forge({"a": 1}), "wrong shape"),
    (_forge([1, {"p": "x"}]), "entries"),
    (_forge([-1, {}]), "out of range"),
    (_forge([1, {"": 2}]), "pubend id"),
    ("tk1." + "A" * TOKEN_CHARS_MAX, "at most"),
])
def test_each_error_names_the_problem(text, says):
    with pytest.raises(TokenError, match=says) as caught:
        decode(text)
    assert caught.value.code == "bad-token"


def test_decode_refuses_non_strings():
    with pytest.raises(TokenError):
        decode(b"tk1.AAAA")  # type: ignore[arg-type]


def test_the_documented_bound_holds_for_the_largest_token():
    widest = {f"{i:0{PUBEND_ID_BYTES_MAX}d}": TICK_MAX for i in range(TOKEN_PUBENDS_MAX)}
    big = CheckpointToken.start(TICK_MAX - 1, widest)
    assert len(big.encode()) <= TOKEN_CHARS_MAX
    assert decode(big.encode()) == big
    with pytest.raises(TokenError, match="at most"):
        CheckpointToken.start(0, {f"p{i}": 1 for i in range(TOKEN_PUBENDS_MAX + 1)})


def test_unlisted_pubends_stand_at_the_default():
    token = CheckpointToken.start(100, {"a": 150, "b": 100})
    assert token.ticks == (("a", 150),)
    assert token.position("a") == 150 and token.position("b") == 100 and token.position("new") == 100


@given(tokens, pubends, ticks)
def test_after_event_moves_forward_only(token, pubend, tick):
    moved = token.after_event(pubend, tick)
    assert moved.position(pubend) == max(tick, token.position(pubend))
    assert moved.covers(token)
    assert moved.default_tick == token.default_tick
    for other, _ in token.ticks:
        if other != pubend:
            assert moved.position(other) == token.position(other)


@given(tokens, st.dictionaries(pubends, ticks, max_size=6))
def test_after_silence_is_a_pointwise_max(token, horizons):
    moved = token.after_silence(horizons)
    for pubend, horizon in horizons.items():
        assert moved.position(pubend) == max(horizon, token.position(pubend))
    assert moved.covers(token)
    assert moved.after_silence(horizons) == moved  # idempotent: a duplicated silence changes nothing


@given(tokens, tokens)
def test_covers_is_the_pointwise_order(a, b):
    names = {p for p, _ in a.ticks} | {p for p, _ in b.ticks} | {"unlisted-pubend"}
    assert a.covers(b) == all(a.position(p) >= b.position(p) for p in names)
    assert a.covers(a)
    if a.covers(b) and b.covers(a):
        assert a == b
