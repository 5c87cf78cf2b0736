"""The groups homed at this broker: each one's subscription, a client connection of the broker's own
(as the retained feed's, core/mqtt/retained.py), and its group machine (core/share/group.py).

Theory of operation. A JOIN routed here (this broker's node id is the closest live one to the
group's key) makes the group if it is new: a connection numbered below the retained feed's is
opened on the broker (`Accepted`, then `Vouch`: the broker opens it as the members' identity, the
group key's scope, which their brokers authenticated; no credential crosses the overlay, whose
links the cluster secret authenticates), so the identity's access rules, limits and the trees'
access lists apply to the group's subscription as to its members'; after the WELCOME the group's
durable subscription is asked for (docs/durable.md): from the position the JOIN
carries (the members' brokers keep the position each SHARE_DELIVER of the group's last home gave:
a new home, after the old one died or a closer broker joined, goes on after what the members
acknowledged there), or from now for a group new to every member broker.
The broker's EVENTS and SILENCE on that connection feed the group machine, whose `Hand`s become
SHARE_DELIVERs to the members' brokers (this broker's own members included: the composer loops those
back); its acknowledged prefix is RELEASEd to the broker, which saves it. A group whose subscription
the broker refuses ends, and its members' brokers get nothing more (their SUBACK was already sent:
the refusal is in `/status`); a group whose members all left for `empty_keep_ns` ends its
durable subscription for good and closes its connection.

Hand-over (core/share/handover.py). A group that starts here from a position naming another home
(the position says where its durable subscription was registered) owes that old home a SHARE_MOVED
once SUBSCRIBED (the new registration here is then known): repeated until its SHARE_LEFT. A
SHARE_MOVED here stops the group at once when its durable subscription is the registration named
(ended for good, its connection closed, nothing handed again: the new home goes on from the
members' position), and forgets that registration in any case (`Forget`: a broker killed and
restarted holds it away since), then answers SHARE_LEFT.

Pacing. The events waiting at the home for a member with window space are bounded as a slow
subscriber's send queue is: when their bytes pass `queued_bytes_max` the group's connection counts
as blocked (`SendBlocked`, as the runtime says of a connection whose send queue passed
send_queue_bytes_max: its subscription stops taking live events), and when the members took them
down to half of it, drained (`SendDrained`: the broker reads what the group has not had yet from
the logs, core/subscription/subscription.py). The queue then holds at most `queued_bytes_max` and
what the one delivery that passed it carried, whatever the members do.

States: the group machine's (SUBSCRIBING -> OPEN -> CLOSED), with the connection's handshake before
it (`welcomed`). Deadlines: each group's own, and each connection's lease renewal, in one `Deadlines`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tidings.core.deadlines import Deadlines
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import ProtocolError, TidingsError
from tidings.core.inputs import Accepted, ConnectionLost, Input, Received, SendBlocked, SendDrained
from tidings.core.session.client_session import ClientSession
from tidings.core.session.cursor import silence_of
from tidings.core.share.group import CLOSED, GroupState, Hand, ShareGroup, ShareLimits
from tidings.core.share.handover import Handover
from tidings.core.share.wire import GroupKey, ShareAck, ShareDeliver, ShareJoin, ShareLeft, ShareMoved
from tidings.core.wire import messages

FIRST_CONN = -2  # the groups' connections count down from here (the retained feed's is -1)
GROUPS_HOMED_MAX = 10_000  # groups one broker is home to; a JOIN past it is dropped (counted)


class BrokerInput(NamedTuple):
    """An input for the broker on a group's connection."""

    input: Input


class PeerOut(NamedTuple):
    """A share message for the broker at `address` (this one's own, looped back by the composer)."""

    address: str
    message: ShareDeliver | ShareAck | ShareMoved | ShareLeft


class Vouch(NamedTuple):
    """The broker opens connection `conn` (accepted) as `identity`, without a handshake
    (core/broker/reading.py `vouch`): it answers WELCOME, or ERROR and closes it."""

    conn: int
    identity: str


class Forget(NamedTuple):
    """The broker forgets durable registration `registration` when `pubend` is its own (as a MOVED
    from another broker makes it: core/reliability/messages.py)."""

    pubend: str
    registration: int


class Renew(NamedTuple):
    conn: int


class GroupDue(NamedTuple):
    conn: int


HomeTimer = Renew | GroupDue
HomeOutput = BrokerInput | Vouch | PeerOut | Forget


@dataclass(slots=True)
class Homed:
    key: GroupKey
    conn: int
    native: ClientSession
    group: ShareGroup
    start: list[object] | None = None  # the position the first JOIN gave (None: from now)
    sub: int | None = None
    welcomed: bool = False
    refusal: str = ""
    paced: bool = False  # the connection counts as blocked: the queue passed queued_bytes_max


class ShareHomes:
    def __init__(self, me: str = "", limits: ShareLimits | None = None) -> None:
        self.me = me  # this broker's peer address (set by the composer once known)
        self.limits = limits or ShareLimits()
        self.groups: dict[GroupKey, Homed] = {}
        self.by_conn: dict[int, Homed] = {}
        self.next_conn = FIRST_CONN
        self.timers: Deadlines[HomeTimer] = Deadlines()
        self.wall_us = 0  # the broker's clock (microseconds since the epoch) as the hub last knew it, for timeouts
        self.dropped = 0  # JOINs past GROUPS_HOMED_MAX
        self.paced = 0  # times a group's subscription was paced (its queue passed queued_bytes_max)
        self.handed = self.redelivered = 0  # deliveries to members by the groups homed here (a member's again)
        self.handover = Handover()  # old homes owed a SHARE_MOVED (core/share/handover.py)
        self.handed_over = 0  # groups stopped here by a SHARE_MOVED of their new home

    # ---- the members' brokers --------------------------------------------------------------------

    def joined(self, now: int, wall_us: int, msg: ShareJoin) -> list[HomeOutput]:
        homed = self.groups.get(msg.group)
        out: list[HomeOutput] = []
        if homed is None or homed.group.state is CLOSED:
            if not msg.group[0]:  # (a scope is an identity: never empty)
                return []
            if not msg.clients:  # a member broker whose members left, telling the position it held
                return self._owe_untaken(now, msg)
            if homed is not None:
                self._forget(homed)
            if len(self.groups) >= GROUPS_HOMED_MAX:
                self.dropped += 1
                return []
            homed = self._open(now, wall_us, msg.group, out)
            homed.start = msg.position
        return out + self._hands(homed, homed.group.joined(now, msg.broker, msg.clients), now)

    def acked(self, now: int, sender: str, msg: ShareAck) -> list[HomeOutput]:
        homed = self.groups.get(msg.group)
        if homed is None:
            return []
        return self._hands(homed, homed.group.acked(now, (sender, msg.client), msg.acked, msg.returned), now)

    def moved(self, now: int, msg: ShareMoved) -> list[HomeOutput]:
        """The group's new home says so: the group stops here if its subscription is the one named."""
        homed = self.groups.get(msg.group)
        out: list[HomeOutput] = []
        left = PeerOut(msg.home, ShareLeft(msg.group, msg.pubend, msg.registration))
        if homed is not None and homed.group.state is not CLOSED:
            home = homed.group.home()
            if home is not None and (home.pubend, home.registration) == (msg.pubend, msg.registration):
                if not msg.taken:  # the group here uses it: nothing to forget
                    return [left]
                self.handed_over += 1
                homed.group.close()
                out += self._close(now, homed)
        return [*out, Forget(msg.pubend, msg.registration), left]

    def left(self, msg: ShareLeft) -> None:
        self.handover.settled(msg.pubend, msg.registration)

    # ---- the broker's side -----------------------------------------------------------------------

    def owns(self, conn: int) -> bool:
        return conn in self.by_conn

    def from_broker(self, now: int, wall_us: int, conn: int, data: bytes | None) -> list[HomeOutput]:
        """What the broker sent a group's connection (None: the broker closed it)."""
        homed = self.by_conn.get(conn)
        if homed is None:
            return []
        if data is None:
            return self._refused(homed, "the broker closed the group's connection", None)
        try:
            msgs = homed.native.receive(data)
        except ProtocolError as exc:  # our own broker broke the protocol: a bug, the group ends
            return self._refused(homed, str(exc), now)
        out: list[HomeOutput] = []
        group = homed.group
        for msg in msgs:
            if isinstance(msg, messages.Events) and msg.sub == homed.sub:
                out += self._hands(homed, group.offer(msg.records), now)
            elif isinstance(msg, messages.Silence) and msg.sub == homed.sub:
                group.silence(silence_of(msg).positions)
            elif isinstance(msg, messages.Subscribed) and msg.sub == homed.sub:
                group.started(msg.checkpoint)
                out += self._owe(now, homed)
            elif isinstance(msg, messages.Welcome) and not homed.welcomed:
                homed.welcomed = True
                try:
                    homed.sub, frame = self._subscribe(homed)
                except TidingsError as exc:  # a filter a member broker should not have sent
                    return out + self._refused(homed, str(exc), now)
                out.append(self._frame(now, wall_us, homed, frame))
                interval = homed.native.renew_interval_ns
                if interval:
                    self.timers.set(Renew(conn), now + interval)
            elif isinstance(msg, messages.Error | messages.Challenge):
                text = msg.message if isinstance(msg, messages.Error) else "the broker asks for a credential"
                return out + self._refused(homed, text, now)
        return out + self._release(now, wall_us, homed)

    def handle_timeout(self, now: int) -> list[HomeOutput]:
        """The groups' own deadlines, the connections' lease renewals (as of the hub's `wall_us`) and
        the SHARE_MOVEDs due again."""
        wall_us = self.wall_us
        out: list[HomeOutput] = [PeerOut(address, msg) for address, msg in self.handover.due(now, self.me)]
        for timer in self.timers.pop_due(now):
            homed = self.by_conn.get(timer.conn)
            if homed is None:
                continue
            if isinstance(timer, Renew) and homed.group.state is not CLOSED:
                out.append(self._frame(now, wall_us, homed, homed.native.renew()))
                interval = homed.native.renew_interval_ns
                if interval:
                    self.timers.set(Renew(timer.conn), now + interval)
            elif isinstance(timer, GroupDue):
                out += self._hands(homed, homed.group.handle_timeout(now), now)
                if homed.group.state is CLOSED:
                    out += self._close(now, homed)
        return out

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.timers.next_deadline(), self.handover.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None

    # ---- inside ----------------------------------------------------------------------------------

    def _open(self, now: int, wall_us: int, key: GroupKey, out: list[HomeOutput]) -> Homed:
        conn = self.next_conn
        self.next_conn -= 1
        homed = Homed(key, conn, ClientSession(key[0], f"share{conn}"), ShareGroup(key, self.limits))
        self.groups[key] = self.by_conn[conn] = homed
        out += [BrokerInput(Accepted(now, conn)), Vouch(conn, key[0])]
        return homed

    def _subscribe(self, homed: Homed) -> tuple[int, bytes]:
        """The group's durable subscription: from the position the members' brokers gave (with the
        home it names: the same registration when that is this broker's, restarted), or now."""
        start = homed.start
        if start is None:
            return homed.native.subscribe(homed.key[2], positions=[])
        default, positions, *home = start
        assert type(default) is int and isinstance(positions, list)  # (checked by the JOIN's decoder)
        return homed.native.subscribe(homed.key[2], start=default, positions=positions,
                                      home=home[0] if home else None)  # type: ignore[arg-type]

    def _owe_untaken(self, now: int, msg: ShareJoin) -> list[HomeOutput]:
        """A JOIN without members for a group not homed here, with a position of another home."""
        old = None if msg.position is None or len(msg.position) < 3 else Checkpoint.from_wire(msg.position).home
        if old is None or old.address == self.me:
            return []
        return [PeerOut(address, moved) for address, moved in self.handover.owe(now, self.me, msg.group, old, False)]

    def _owe(self, now: int, homed: Homed) -> list[HomeOutput]:
        """SUBSCRIBED: a position of another home makes this one owe it a SHARE_MOVED."""
        if homed.start is None or len(homed.start) < 3:
            return []
        old, mine = Checkpoint.from_wire(homed.start).home, homed.group.home()
        if old is None or mine is None or old.pubend == mine.pubend:
            return []
        return [PeerOut(address, msg) for address, msg in self.handover.owe(now, self.me, homed.key, old)]

    def _frame(self, now: int, wall_us: int, homed: Homed, frame: bytes) -> BrokerInput:
        return BrokerInput(Received(now, wall_us, homed.conn, frame))

    def _hands(self, homed: Homed, hands: list[Hand], now: int) -> list[HomeOutput]:
        deadline = homed.group.next_deadline()
        if deadline is None:
            self.timers.cancel(GroupDue(homed.conn))
        else:
            self.timers.set(GroupDue(homed.conn), deadline)
        out: list[HomeOutput] = []
        position = homed.group.position() if hands else None
        self.handed += len(hands)
        for hand in hands:
            broker, client = hand.member
            out.append(PeerOut(broker, ShareDeliver(homed.key, self.me, client, hand.delivery, hand.record, position)))
        return out + self._pace(now, homed) + self._release(now, 0, homed)

    def _pace(self, now: int, homed: Homed) -> list[HomeOutput]:
        """The group's connection blocked or drained by what waits for a member (the module says)."""
        queued, limit = homed.group.queued_bytes, self.limits.queued_bytes_max
        if homed.group.state is CLOSED:
            return []
        if not homed.paced and queued >= limit:
            homed.paced = True
            self.paced += 1
            return [BrokerInput(SendBlocked(now, homed.conn))]
        if homed.paced and queued <= limit // 2:
            homed.paced = False
            return [BrokerInput(SendDrained(now, homed.conn))]
        return []

    def _release(self, now: int, wall_us: int, homed: Homed) -> list[HomeOutput]:
        wire = homed.group.release()
        if wire is None or homed.sub is None or homed.group.state is CLOSED:
            return []
        return [self._frame(now, wall_us, homed, homed.native.release(homed.sub, wire))]

    def _refused(self, homed: Homed, why: str, now: int | None) -> list[HomeOutput]:
        """The group ends; its connection is closed (`now` None: the broker closed it)."""
        homed.refusal = why
        homed.group.refused()
        self._forget(homed)
        return [] if now is None else [BrokerInput(ConnectionLost(now, homed.conn))]

    def _close(self, now: int, homed: Homed) -> list[HomeOutput]:
        """The group ended (no members): its durable subscription is ended for good, its connection closed."""
        self._forget(homed)
        drain = [BrokerInput(SendDrained(now, homed.conn))] if homed.paced else []  # (so its UNSUBSCRIBE is read)
        end = [] if homed.sub is None else [self._frame(now, 0, homed, homed.native.unsubscribe(homed.sub, True))]
        return [*drain, *end, BrokerInput(ConnectionLost(now, homed.conn))]

    def _forget(self, homed: Homed) -> None:
        self.by_conn.pop(homed.conn, None)
        if self.groups.get(homed.key) is homed and homed.group.state is CLOSED:
            self.redelivered += homed.group.redelivered  # (its figure kept: it is not in `open_` any more)
            homed.group.redelivered = 0
            if not homed.refusal:
                del self.groups[homed.key]
        self.timers.cancel(Renew(homed.conn))
        self.timers.cancel(GroupDue(homed.conn))

    def status(self) -> list[dict[str, object]]:
        return [{**h.group.status(), "paced": h.paced, **({"refusal": h.refusal} if h.refusal else {})}
                for h in self.groups.values()]

    def figures(self) -> dict[str, int]:
        """The homes' figures (core/mqtt/figures.py FIGURES: `tidings_mqtt_share_*`)."""
        open_ = [h.group for h in self.groups.values() if h.group.state is not CLOSED]
        return {"share_homed": len(open_), "share_deliveries": self.handed,
                "share_redelivered": self.redelivered + sum(g.redelivered for g in open_),
                "share_handed_over": self.handed_over, "share_moved_owed": len(self.handover.debts),
                "share_queued_bytes": sum(g.queued_bytes for g in open_), "share_paced": self.paced,
                "share_joins_dropped": self.dropped}


__all__ = ["BrokerInput", "Forget", "GroupState", "PeerOut", "ShareHomes", "Vouch"]
