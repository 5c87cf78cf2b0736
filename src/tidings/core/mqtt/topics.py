"""MQTT topics and tidings channels: one topic space.

Theory of operation. MQTT's topic model is tidings' channel model (core/channels.py): levels split by
`/`, empty levels allowed (`a//b`, a leading `/`), `+` for one whole level and `#` for the rest, last
only, matching the parent too (`a/#` matches `a`), and a filter that starts with a wildcard does not
match a topic whose first level starts with `$`. So the mapping is the identity, which is trivially
reversible: an MQTT PUBLISH on topic T is a tidings event on channel T, an MQTT SUBSCRIBE to filter F
is a tidings subscription to pattern F, and an event on channel C reaches an MQTT subscriber as a
PUBLISH on topic C (every channel is a valid topic name: non-empty, without wildcards or NUL, at most
CHANNEL_BYTES_MAX bytes, far under MQTT's 65,535).

What tidings' channel rules cannot hold is refused, with the reason code MQTT 5.0 gives (a 3.1.1
client gets what its version has: a SUBSCRIBE's failure return code 0x80, a PUBLISH the close of
its connection):

- a topic name or filter over CHANNEL_BYTES_MAX bytes of UTF-8 or over SEGMENTS_MAX levels:
  0x90 Topic Name invalid (PUBLISH), 0x8F Topic Filter invalid (SUBSCRIBE);
- a topic name with a wildcard, an empty one, a NUL, a wildcard that does not fill its level
  (`a+/b`), `#` not last: the same codes (the MQTT spec calls them malformed; a broker that refuses
  them with a reason code keeps serving the connection);
- a shared subscription (`$share/GROUP/FILTER`) is not a pattern: 0x9E here, where the broker
  serves none; the MQTT session gives shared filters to core/share/ (docs/mqtt.md).

Invariants: `topic_of(channel_of(t)) == t` for every topic `channel_of` accepts, `channel_of(topic_of(c))
== c` for every valid channel (tests/unit/test_mqtt_topics.py, by Hypothesis).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.channels import validate_channel, validate_pattern
from tidings.core.errors import ChannelError

TOPIC_NAME_INVALID = 0x90  # MQTT 5.0 reason code (PUBACK, DISCONNECT)
TOPIC_FILTER_INVALID = 0x8F  # MQTT 5.0 reason code (SUBACK)
SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
SHARED_PREFIX = "$share/"


@dataclass(frozen=True, slots=True)
class TopicRefused:
    """A topic name or filter tidings cannot hold: the MQTT 5.0 reason code and why, in words."""

    reason_code: int
    reason: str


def channel_of(topic: str) -> str | TopicRefused:
    """The channel of an MQTT PUBLISH's topic name, or why it is refused."""
    try:
        return validate_channel(topic)
    except ChannelError as exc:
        return TopicRefused(TOPIC_NAME_INVALID, str(exc))


def pattern_of(topic_filter: str) -> str | TopicRefused:
    """The pattern of an MQTT SUBSCRIBE's topic filter, or why it is refused."""
    if topic_filter.startswith(SHARED_PREFIX):
        return TopicRefused(SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
                            f"shared subscriptions ({topic_filter[:64]!r}) are not supported yet")
    try:
        return validate_pattern(topic_filter)
    except ChannelError as exc:
        return TopicRefused(TOPIC_FILTER_INVALID, str(exc))


def topic_of(channel: str) -> str:
    """The MQTT topic name of an event's channel (every channel is one)."""
    return channel
