"""The shared subscriptions' members at their own broker: which MQTT clients here are members of
which group, the JOINs that tell each group's home, and the deliveries and acknowledgements between
the home and the clients.

Theory of operation. An MQTT SUBSCRIBE to `$share/GROUP/FILTER` (core/mqtt/session.py) makes its
client a member of the group (scope: the client's identity, GROUP, FILTER) here
(`join`), and this broker routes a SHARE_JOIN naming all its members of that group towards the
group's key (core/share/wire.py): the overlay takes it to the group's home, whatever broker that is
now. The JOIN is repeated every `refresh_interval_ns` while the group has members here, so the home
keeps knowing them, and when the home changes (it died and the next closest broker covers the key,
or a closer broker joined) the next JOIN reaches the new home, which takes the group over from the
durable position it holds or, new, from now. A member that unsubscribes or whose connection ends
leaves (`leave`, `gone`): a JOIN without it goes at once, and the home hands what it held to the
others. Without members here, the JOIN (with no member) goes on every `refresh_interval_ns` for
`empty_tell_ns` with the position this broker held: a home killed within its group's
`empty_keep_ns` then hears from the next home that the group's registration there is to be
forgotten (core/share/handover.py).

A SHARE_DELIVER for a member here becomes a `LocalDeliver` for its connection (the composer gives
it to the MQTT session, which sends the PUBLISH through its window); one for a client no longer here
is RETURNed to the home. What the client acknowledges (`acked`: its PUBACK; at QoS 0 when sent) is
gathered per home and sent as one SHARE_ACK per group and client at the end of the turn
(`take_acks`).

A plain data structure with one `Deadlines` (the JOINs' refresh): `now` is an argument.
"""

from __future__ import annotations

from typing import NamedTuple

from tidings.core.deadlines import Deadlines
from tidings.core.share.group import ShareLimits
from tidings.core.share.home import PeerOut
from tidings.core.share.wire import GroupKey, ShareAck, ShareDeliver, ShareJoin


class RouteJoin(NamedTuple):
    """Route `join` towards its group's home."""

    join: ShareJoin


class ShareRef(NamedTuple):
    """One delivery of a group to a member here: acknowledged to `home` by its id."""

    group: GroupKey
    home: str
    client: str
    delivery: int


class LocalDeliver(NamedTuple):
    """Deliver `record` (an event's fields) to the MQTT connection `conn`."""

    conn: int
    ref: ShareRef
    record: list[object]


class Refresh(NamedTuple):
    group: GroupKey


class ShareMembers:
    def __init__(self, me: str = "", limits: ShareLimits | None = None) -> None:
        self.me = me  # this broker's peer address (set by the composer once known)
        self.limits = limits or ShareLimits()
        self.members: dict[GroupKey, dict[str, int]] = {}  # group -> client id -> its connection
        self.of_conn: dict[int, dict[GroupKey, str]] = {}  # connection -> its groups (-> its client id)
        self.timers: Deadlines[Refresh] = Deadlines()
        self.acks: dict[tuple[str, GroupKey, str], tuple[list[int], list[int]]] = {}  # (home, group, client)
        self.positions: dict[GroupKey, list[object]] = {}  # each group's position, as its home last said
        self.emptied: dict[GroupKey, int] = {}  # groups without members here now: since when
        self.returned = 0

    def join(self, now: int, conn: int, client: str, key: GroupKey) -> list[RouteJoin]:
        """`client`'s connection `conn` is a member of `key` (each connection one member: a client id
        taken over by another connection is a new member, and the old one's deliveries go again)."""
        client = f"{client}@{conn}"
        self.members.setdefault(key, {})[client] = conn
        self.of_conn.setdefault(conn, {})[key] = client
        return self._tell(now, key)

    def leave(self, now: int, conn: int, key: GroupKey) -> list[RouteJoin]:
        client = self.of_conn.get(conn, {}).pop(key, None)
        if client is None:
            return []
        self.members.get(key, {}).pop(client, None)
        return self._tell(now, key)

    def gone(self, now: int, conn: int) -> list[RouteJoin]:
        """The connection ended: it leaves every group it was a member of."""
        out: list[RouteJoin] = []
        for key in list(self.of_conn.get(conn, {})):
            out += self.leave(now, conn, key)
        self.of_conn.pop(conn, None)
        return out

    def groups_of(self, conn: int) -> dict[GroupKey, str]:
        return self.of_conn.get(conn, {})

    def delivered(self, msg: ShareDeliver) -> LocalDeliver | None:
        """A delivery from the home: for the member's connection, or RETURNed (None)."""
        ref = ShareRef(msg.group, msg.home, msg.client, msg.delivery)
        conn = self.members.get(msg.group, {}).get(msg.client)
        if msg.position is not None and msg.group in self.members:
            self.positions[msg.group] = msg.position
        if conn is None:
            self.returned += 1
            self.acked(ref, False)
            return None
        return LocalDeliver(conn, ref, msg.record)

    def acked(self, ref: ShareRef, done: bool = True) -> None:
        """The member acknowledged `ref` (`done`), or it is returned to the home."""
        acked, returned = self.acks.setdefault((ref.home, ref.group, ref.client), ([], []))
        (acked if done else returned).append(ref.delivery)

    def take_acks(self) -> list[PeerOut]:
        out = [PeerOut(home, ShareAck(group, client, tuple(acked), tuple(returned)))
               for (home, group, client), (acked, returned) in self.acks.items()]
        self.acks.clear()
        return out

    def handle_timeout(self, now: int) -> list[RouteJoin]:
        out: list[RouteJoin] = []
        for timer in self.timers.pop_due(now):
            out += self._tell(now, timer.group)
        return out

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def _tell(self, now: int, key: GroupKey) -> list[RouteJoin]:
        """The group's JOIN with the members here now; repeated while there are some, and without
        members, with the position held, for `empty_tell_ns` after the last left (the module says)."""
        clients = tuple(sorted(self.members.get(key, {})))
        refresh = now + self.limits.refresh_interval_ns
        if clients:
            if self.emptied.pop(key, None) is not None:  # a member again: the group's position is the home's
                self.positions.pop(key, None)  # (as before its members left: none)
            self.timers.set(Refresh(key), refresh)
            return [RouteJoin(ShareJoin(key, self.me, clients, self.positions.get(key)))]
        self.members.pop(key, None)
        since = self.emptied.setdefault(key, now)
        position = self.positions.get(key)
        if position is not None and now - since < self.limits.empty_tell_ns:
            self.timers.set(Refresh(key), refresh)
            return [RouteJoin(ShareJoin(key, self.me, (), position))]
        self.timers.cancel(Refresh(key))
        self.emptied.pop(key, None)
        self.positions.pop(key, None)
        return [RouteJoin(ShareJoin(key, self.me, (), position))] if now == since else []

    def status(self) -> dict[str, int]:
        return {"share_groups_joined": len(self.members),
                "share_members": sum(len(m) for m in self.members.values()), "share_returned": self.returned}
