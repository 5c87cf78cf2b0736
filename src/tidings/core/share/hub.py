"""A broker's shared subscriptions: the groups homed here (core/share/home.py) and the members here
(core/share/members.py), composed, with what they send each other when both are this broker looped
back at once. The MQTT gateway (core/mqtt/gateway.py) drives it: the sessions' SUBSCRIBEs, acks and
endings in, the broker's frames on the groups' connections and the share messages of the overlay in,
and `take()` out: inputs for the broker, JOINs to route, messages for other brokers, and deliveries
for the MQTT sessions.
"""

from __future__ import annotations

from collections.abc import Callable

from tidings.core.auth.names import ANONYMOUS
from tidings.core.mqtt import topics
from tidings.core.share.group import ShareLimits
from tidings.core.share.home import BrokerInput, Forget, PeerOut, ShareHomes, Vouch
from tidings.core.share.members import LocalDeliver, RouteJoin, ShareMembers, ShareRef
from tidings.core.share.wire import ShareAck, ShareDeliver, ShareJoin, ShareLeft, ShareMessage, ShareMoved

HubOutput = BrokerInput | Vouch | RouteJoin | PeerOut | LocalDeliver | Forget

SUCCESS = 0x00
NO_SUBSCRIPTION_EXISTED = 0x11
TOPIC_FILTER_INVALID = 0x8F
NOT_AUTHORIZED = 0x87


def parse(topic_filter: str) -> tuple[str, str] | topics.TopicRefused | None:
    """(GROUP, FILTER) of `$share/GROUP/FILTER`; None for a filter that is not shared; refused when
    the group name is empty or holds `+` or `#`, or the filter is one tidings refuses (4.8.2)."""
    if not topic_filter.startswith(topics.SHARED_PREFIX):
        return None
    name, sep, rest = topic_filter[len(topics.SHARED_PREFIX):].partition("/")
    if not name or not sep or "+" in name or "#" in name:
        return topics.TopicRefused(TOPIC_FILTER_INVALID, "a shared subscription is $share/GROUP/FILTER, GROUP "
                                   "at least one character without '/', '+' or '#'")
    pattern = topics.pattern_of(rest)
    if isinstance(pattern, topics.TopicRefused):
        return pattern
    return name, rest


class ShareHub:
    def __init__(self, limits: ShareLimits | None = None,
                 may_subscribe: Callable[[int, str], bool] = lambda conn, pattern: True) -> None:
        """`may_subscribe(conn, pattern)`: the broker's access rules, for the client of `conn`."""
        self.may_subscribe = may_subscribe
        self.homes = ShareHomes(limits=limits)
        self.members = ShareMembers(limits=limits)
        self.outbox: list[HubOutput] = []
        self.now = 0
        self.wall_us = 0

    @property
    def me(self) -> str:
        return self.members.me

    def set_me(self, address: str) -> None:
        """This broker's peer address (once its overlay started)."""
        self.homes.me = self.members.me = address

    # ---- the MQTT sessions -----------------------------------------------------------------------

    def subscribe(self, conn: int, client: str, scope: str, topic_filter: str) -> int | None:
        """A member's SUBSCRIBE of `topic_filter`, `scope` being its identity (the broker admitted
        it as; "" reads as anonymous): its SUBACK code (the QoS granted is the caller's), None when
        the filter is not a shared one. The identity's access rules are checked here, at the member's
        broker, and again at the group's home, whose subscription is made as the same identity."""
        scope = scope or ANONYMOUS
        parsed = parse(topic_filter)
        if parsed is None:
            return None
        if isinstance(parsed, topics.TopicRefused):
            return parsed.reason_code
        if not self.may_subscribe(conn, parsed[1]):
            return NOT_AUTHORIZED
        self.outbox += self.members.join(self.now, conn, client, (scope, *parsed))
        return SUCCESS

    def unsubscribe(self, conn: int, scope: str, topic_filter: str) -> int | None:
        """UNSUBSCRIBE's code for `topic_filter`, None when it is not a shared one."""
        scope = scope or ANONYMOUS
        parsed = parse(topic_filter)
        if parsed is None:
            return None
        key = (scope, *parsed) if not isinstance(parsed, topics.TopicRefused) else None
        if key is None or key not in self.members.groups_of(conn):
            return NO_SUBSCRIPTION_EXISTED
        self.outbox += self.members.leave(self.now, conn, key)
        return SUCCESS

    def acked(self, ref: ShareRef, done: bool = True) -> None:
        """A member acknowledged a delivery (`done`), or could not take it (returned to the home)."""
        self.members.acked(ref, done)

    def gone(self, conn: int) -> None:
        self.outbox += self.members.gone(self.now, conn)

    # ---- the broker and the overlay --------------------------------------------------------------

    def owns(self, conn: int) -> bool:
        return self.homes.owns(conn)

    def from_broker(self, conn: int, data: bytes | None) -> None:
        self.outbox += self.homes.from_broker(self.now, self.wall_us, conn, data)

    def arrived(self, sender: str, message: ShareMessage) -> None:
        """A share message from the broker at `sender` (or routed here: this broker is the home)."""
        if isinstance(message, ShareJoin):
            self.outbox += self.homes.joined(self.now, self.wall_us, message)
        elif isinstance(message, ShareAck):
            self.outbox += self.homes.acked(self.now, sender, message)
        elif isinstance(message, ShareMoved):
            self.outbox += self.homes.moved(self.now, message)
        elif isinstance(message, ShareLeft):
            self.homes.left(message)
        else:
            local = self.members.delivered(message)
            if local is not None:
                self.outbox.append(local)

    def handle_timeout(self, now: int) -> list[HubOutput]:
        self.now = now
        self.homes.wall_us = self.wall_us
        self.outbox += self.members.handle_timeout(now)
        self.outbox += self.homes.handle_timeout(now)
        return self.take()

    def next_deadline(self) -> int | None:
        if self.outbox:  # (more than the composer's rounds in one turn: at once)
            return self.now
        deadlines = [d for d in (self.members.next_deadline(), self.homes.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None

    def take(self) -> list[HubOutput]:
        """What is to be done, the messages between this broker's own homes and members handled here."""
        self.outbox += self.members.take_acks()
        out: list[HubOutput] = []
        while self.outbox:
            batch, self.outbox = self.outbox, []
            for item in batch:
                if isinstance(item, PeerOut) and item.address == self.me:
                    self.arrived(self.me, item.message)
                else:
                    out.append(item)
            self.outbox += self.members.take_acks()
        return out

    def status(self) -> dict[str, object]:
        return {"share_groups_homed": self.homes.status(), **self.homes.figures(), **self.members.status()}


__all__ = ["HubOutput", "ShareDeliver", "ShareHub", "parse"]
