"""MQTT 5.0 Topic Aliases (3.3.2.3.4), both ways on one connection.

An alias is a number 1..maximum standing for a topic, the receiver's maximum announced in CONNECT
(the client's: how many we may set) or CONNACK (ours: how many the client may set). A PUBLISH that
carries a topic and an alias sets the alias; one that carries an alias and an empty topic uses it.
Aliases belong to the connection: none survives it, and a Published fact carries the topic itself.

`InboundAliases`, the client's: an alias of 0 is refused by the codec; one above our maximum is
0x94 Topic Alias Invalid; an empty topic whose alias was never set is 0x82 Protocol Error. At most
`maximum` topics are held, each within one packet: bounded by what we announced.

`OutboundAliases`, ours: a topic sent before goes as its alias and an empty topic (the bytes saved
on every repeated delivery); a new topic takes the next free alias, and once all are taken, the one
used least recently (an `OrderedDict` in use order, so the choice is deterministic). A PUBLISH that
set an alias but was not sent (over the client's Maximum Packet Size) `forget`s it: the client never
learned it, and its number is free again.
"""

from __future__ import annotations

from collections import OrderedDict

from tidings.core.mqtt.reason_codes import ReasonCode


class InboundAliases:
    __slots__ = ("maximum", "topics")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self.topics: dict[int, str] = {}

    def resolve(self, topic: str, alias: int | None) -> str | ReasonCode:
        """The topic a PUBLISH names, or the reason code it is refused with."""
        if alias is None:
            return topic
        if alias > self.maximum:
            return ReasonCode.TOPIC_ALIAS_INVALID
        if topic:
            self.topics[alias] = topic
            return topic
        return self.topics.get(alias, ReasonCode.PROTOCOL_ERROR)


class OutboundAliases:
    __slots__ = ("aliases", "free", "maximum")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self.aliases: OrderedDict[str, int] = OrderedDict()  # topic -> alias, least recently used first
        self.free: list[int] = []  # aliases forgotten, to take again before a new number

    def choose(self, topic: str) -> tuple[str, int | None]:
        """The (topic, alias) to send for `topic`: ("", alias) when the client knows it."""
        if not self.maximum:
            return topic, None
        alias = self.aliases.get(topic)
        if alias is not None:
            self.aliases.move_to_end(topic)
            return "", alias
        if self.free:
            alias = self.free.pop()
        elif len(self.aliases) < self.maximum:
            alias = len(self.aliases) + 1
        else:
            _, alias = self.aliases.popitem(last=False)
        self.aliases[topic] = alias
        return topic, alias

    def forget(self, topic: str) -> None:
        """The PUBLISH that set `topic`'s alias was not sent: the alias is free again."""
        alias = self.aliases.pop(topic, None)
        if alias is not None:
            self.free.append(alias)
