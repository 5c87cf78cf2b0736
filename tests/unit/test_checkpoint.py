"""Checkpoint tokens: round trips, and every kind of damage is a clear error."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.durable.checkpoint import PREFIX, Checkpoint, TokenError

ticks = st.integers(min_value=0, max_value=2**62)
checkpoints = st.builds(Checkpoint, ticks, st.dictionaries(st.text(min_size=1, max_size=20), ticks, max_size=20))


@given(checkpoints)
def test_a_token_gives_back_its_checkpoint_and_is_printable(ck):
    token = ck.encode()
    assert token.startswith(PREFIX) and token.isprintable() and " " not in token
    assert Checkpoint.decode(token) == ck


@given(checkpoints, st.data())
def test_any_changed_character_or_truncation_is_refused(ck, data):
    token = ck.encode()
    i = data.draw(st.integers(len(PREFIX), len(token) - 1))
    other = data.draw(st.sampled_from("ABCxyz019-_").filter(lambda c: c != token[i]))
    with pytest.raises(TokenError):
        decoded = Checkpoint.decode(token[:i] + other + token[i + 1:])
        assert decoded == ck  # a change that decodes must not decode to another position
        raise TokenError("same")
    with pytest.raises(TokenError):
        Checkpoint.decode(token[:i])


@pytest.mark.parametrize("garbage", ["", "tk1.", "tk2.abc", "hello", "tk1.!!!!", 42, None, "tk1." + "A" * 300_000])
def test_garbage_is_a_clear_error(garbage):
    with pytest.raises(TokenError):
        Checkpoint.decode(garbage)


def test_positions_only_move_forward():
    ck = Checkpoint(100)
    ck.delivered("a", 50)  # below the default: nothing to record
    assert ck.positions == {} and ck.position("a") == 100
    ck.delivered("a", 150)
    ck.silence({"a": 120, "b": 300})
    assert ck.positions == {"a": 150, "b": 300} and ck.position("c") == 100
