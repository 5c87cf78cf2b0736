import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.channels import pattern_matches, validate_channel, validate_pattern
from tidings.core.errors import ChannelError


@pytest.mark.parametrize("channel", ["a", "a/b/c", "nodes/host1/load", "a//b", "/a", "a/", "$SYS/x", "ü/ß"])
def test_valid_channels(channel):
    assert validate_channel(channel) == channel


@pytest.mark.parametrize(("channel", "words"), [
    ("", "empty"), ("a/+/b", "wildcard"), ("a/#", "wildcard"), ("a\x00b", "NUL"),
    ("x" * 2000, "longer"), ("/".join(["a"] * 40), "segments"), (7, "string"),
])
def test_invalid_channels_name_the_problem(channel, words):
    with pytest.raises(ChannelError, match=words):
        validate_channel(channel)


@pytest.mark.parametrize("pattern", ["#", "+", "a/+/c", "a/#", "+/+", "a/b/c", "+/#"])
def test_valid_patterns(pattern):
    assert validate_pattern(pattern) == pattern


@pytest.mark.parametrize("pattern", ["a/#/b", "a+", "a/b#", "#/a", "", "a/+x"])
def test_invalid_patterns(pattern):
    with pytest.raises(ChannelError) as info:
        validate_pattern(pattern)
    assert info.value.code == "bad-pattern"


@pytest.mark.parametrize(("pattern", "channel", "expected"), [
    ("a/b", "a/b", True), ("a/+", "a/b", True), ("a/+", "a/b/c", False), ("a/#", "a", True),
    ("a/#", "a/b/c", True), ("#", "a/b", True), ("+", "a/b", False), ("+/+", "/x", True),
    ("#", "$SYS/x", False), ("+/x", "$SYS/x", False), ("$SYS/#", "$SYS/x", True), ("a/+/c", "a//c", True),
])
def test_mqtt_matching_rules(pattern, channel, expected):
    assert pattern_matches(pattern, channel) is expected


def reference_match(pattern: str, channel: str) -> bool:
    if pattern[0] in "+#" and channel.startswith("$"):
        return False
    rx = ""
    parts = pattern.split("/")
    for i, seg in enumerate(parts):
        if seg == "#":
            rx = rx[:-1] + "(/.*)?" if i else ".*"
            break
        rx += ("[^/]*" if seg == "+" else re.escape(seg)) + ("/" if i < len(parts) - 1 else "")
    return re.fullmatch(rx, channel) is not None


segment = st.sampled_from(["a", "b", "", "$s"])


@settings(max_examples=400, deadline=None)
@given(st.lists(segment, min_size=1, max_size=4),
       st.lists(st.sampled_from(["a", "b", "", "+", "#"]), min_size=1, max_size=4))
def test_matching_agrees_with_a_regex_reference(csegs, psegs):
    channel = "/".join(csegs)
    if "#" in psegs:
        psegs = psegs[: psegs.index("#") + 1]
    pattern = "/".join(psegs)
    if not pattern or not channel:
        return
    validate_channel(channel)
    validate_pattern(pattern)
    assert pattern_matches(pattern, channel) == reference_match(pattern, channel)
