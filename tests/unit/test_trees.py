import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.channels import pattern_matches, validate_channel, validate_pattern
from tidings.core.multicast.trees import publish_trees, subscription_tree, tree_key
from tidings.core.overlay.node_id import node_id_from
from tidings.core.publish import intake


def test_publish_trees_of_a_channel():
    assert publish_trees("a/b/c") == ["a/b/c", "a/b/c/#", "a/b/#", "a/#", "#"]
    assert publish_trees("a") == ["a", "a/#", "#"]
    assert publish_trees("a//b") == ["a//b", "a//b/#", "a//#", "a/#", "#"]
    assert publish_trees("/") == ["/", "//#", "/#", "#"]


@pytest.mark.parametrize(("pattern", "tree"), [
    ("a/b/c", "a/b/c"), ("a/+/c", "a/#"), ("+/x", "#"), ("#", "#"), ("a/b/#", "a/b/#"),
    ("+", "#"), ("a//+", "a//#"), ("/", "/"), ("a/b/+/#", "a/b/#"), ("$SYS/#", "$SYS/#"),
])
def test_subscription_tree(pattern, tree):
    assert subscription_tree(pattern) == tree


def test_tree_key_is_the_pastry_key_of_the_name():
    assert tree_key("a/#") == node_id_from("tree:a/#")
    assert tree_key("a/#") != tree_key("a/b")


SEGMENT = st.sampled_from(["", "a", "b", "$x", "ü"])
CHANNELS = st.lists(SEGMENT, min_size=1, max_size=5).map("/".join).filter(bool)


@st.composite
def pattern_for(draw, channel: str):
    """A pattern that matches `channel`: some segments become `+`, a suffix may become `#`."""
    segments = channel.split("/")
    out = [("+" if draw(st.booleans()) else s) for s in segments]
    cut = draw(st.integers(0, len(out) + 1))
    if cut <= len(out):
        out = [*out[:cut], "#"]
    return "/".join(out)


@settings(max_examples=400)
@given(st.data())
def test_every_matching_subscription_meets_the_publish_in_a_tree(data):
    channel = data.draw(CHANNELS)
    pattern = data.draw(pattern_for(channel))
    validate_channel(channel)
    validate_pattern(pattern)
    if pattern_matches(pattern, channel):
        assert subscription_tree(pattern) in publish_trees(channel)


@settings(max_examples=400)
@given(CHANNELS, st.lists(st.sampled_from(["", "a", "b", "+", "$x"]), min_size=1, max_size=5), st.booleans())
def test_any_pattern_any_channel(channel, segments, tail):
    pattern = "/".join([*segments, "#"] if tail else segments) or "#"
    if pattern_matches(validate_pattern(pattern), validate_channel(channel)):
        assert subscription_tree(pattern) in publish_trees(channel)
    assert len(publish_trees(channel)) == channel.count("/") + 3


def test_the_intakes_channel_trees_fill_on_a_miss_and_empty_when_full(monkeypatch):
    """The intake's cache (publish/intake.py ChannelTrees), which the pubend's source reads too: a
    channel's trees are publish_trees', worked out on the first lookup; a full cache starts again."""
    monkeypatch.setattr(intake, "CHANNEL_CACHE_MAX", 2)
    trees = intake.ChannelTrees()
    assert trees["a/b"] == publish_trees("a/b") and list(trees) == ["a/b"]
    assert trees["a/b"] is trees["a/b"]  # (looked up, not worked out again)
    trees["c"]
    assert list(trees) == ["a/b", "c"]
    assert trees["d"] == publish_trees("d") and list(trees) == ["d"]
