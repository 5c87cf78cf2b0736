"""The MQTT topic <-> tidings channel mapping (core/mqtt/topics.py): reversible, MQTT's matching rules; and
a user property's value as an attribute (core/mqtt/bridge.py), reversible too."""

from hypothesis import given
from hypothesis import strategies as st

from tidings.core.channels import CHANNEL_BYTES_MAX, SEGMENTS_MAX, pattern_matches, validate_channel
from tidings.core.errors import ChannelError
from tidings.core.mqtt import bridge, topics
from tidings.core.mqtt.topics import TopicRefused

LEVEL = st.text(alphabet=st.characters(blacklist_characters="/+#\x00", blacklist_categories=("Cs",)), max_size=8)
TOPICS = st.lists(LEVEL, min_size=1, max_size=6).map("/".join).filter(bool)


@given(TOPICS)
def test_a_topic_round_trips_through_its_channel(topic):
    channel = topics.channel_of(topic)
    assert channel == topic  # the identity: MQTT's model is tidings' own
    assert topics.topic_of(channel) == topic


@given(st.text(max_size=40))
def test_a_channel_round_trips_through_its_topic(text):
    try:
        channel = validate_channel(text)
    except ChannelError:
        return
    assert topics.channel_of(topics.topic_of(channel)) == channel


def test_empty_levels_and_a_leading_slash_are_held():
    for topic in ("/a", "a//b", "/", "a/", "$SYS/x"):
        assert topics.channel_of(topic) == topic


def test_topics_tidings_cannot_hold_are_refused_with_the_spec_reason_code():
    for topic in ("", "a/+", "a/#", "a\x00b", "x" * (CHANNEL_BYTES_MAX + 1), "/".join(["a"] * (SEGMENTS_MAX + 1))):
        refused = topics.channel_of(topic)
        assert isinstance(refused, TopicRefused) and refused.reason_code == topics.TOPIC_NAME_INVALID, topic
    for flt in ("a/#/b", "a+/b", "", "#x"):
        refused = topics.pattern_of(flt)
        assert isinstance(refused, TopicRefused) and refused.reason_code == topics.TOPIC_FILTER_INVALID, flt
    shared = topics.pattern_of("$share/g/a/b")
    assert isinstance(shared, TopicRefused)
    assert shared.reason_code == topics.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED


def test_dollar_topics_are_not_matched_by_a_leading_wildcard():
    for flt in ("#", "+/x", "+/+"):
        assert pattern_matches(topics.pattern_of(flt), "$SYS/x") is False
    assert pattern_matches(topics.pattern_of("$SYS/#"), "$SYS/x")
    assert pattern_matches(topics.pattern_of("a/#"), "a")  # '#' matches the parent level


@given(st.text(max_size=30))
def test_a_user_property_value_round_trips_through_its_attribute(text):
    assert bridge.text_of(bridge.attribute_of(text)) == text


def test_user_property_values_in_canonical_number_form_are_numbers():
    assert [bridge.attribute_of(t) for t in ("3", "-2", "2.5", "true", "false", "03", "1e5", "nan", "x")] == [
        3, -2, 2.5, True, False, "03", "1e5", "nan", "x"]
