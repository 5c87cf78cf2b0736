"""A broker of a fake overlay for the data source's Spark-free tests: its pubend, its address, the
members its leaf set names, its log and how much of it retention released."""

from __future__ import annotations

from dataclasses import dataclass, field

from tidings.core.event import Event


@dataclass
class FakeBroker:
    pubend: str
    address: str
    leaf_set: list[str]
    events: list[Event] = field(default_factory=list)
    released_through: int = 0

    def publish(self, tick: int, channel: str = "load/h1") -> Event:
        event = Event(self.pubend, tick, channel, {"n": tick}, "test", "pub", b"")
        self.events.append(event)
        return event
