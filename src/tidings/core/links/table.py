"""The table of links and connections that `PeerLinks` (peer_links.py) runs its handshake and
messages over, with the bookkeeping every part shares.

Theory of operation. `LinkTable` holds the links by the peer's address (plus the aliases of
addresses we dialled that turned out to advertise another), the connections by id, the addresses
with a Connect outstanding, and the one `Deadlines` every link and challenge timer lives in. Its
operations keep the invariants of peer_links.py: `_dial` issues at most one Connect per address
(a dial still out takes over, also for a new link to an address whose old link was dropped
meanwhile), `_enqueue`/`_flush` move frames through a link's bounded queue (link.py), `_close`
ends a connection with PEER_ERROR (nothing more is read from it), `_refuse`/`_refuse_dialled` end
a handshake with a `Refusal` (refusals.py), counted by side and reason in `refusals` and handed to
the runtime as `PeerRefused`, `_fail` closes a connection that broke the protocol, and `_drop`
forgets a link, its queue and the aliases naming it, and reports its peer `PeerUnreachable` with
the next output (`_output`), after the messages of that input.
"""

from __future__ import annotations

from typing import Any

from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.effects import Connect, Disconnect, Effect, PeerRefused, Send
from tidings.core.links.link import (
    DIALLING,
    OPEN,
    AuthTimer,
    Link,
    LinkOutput,
    LinkTimer,
    PeerConfig,
    PeerConn,
    PeerMessage,
    PeerUnreachable,
    RttMeasured,
)
from tidings.core.links.refusals import ACCEPTOR_SIDE, DIALLER_SIDE, Refusal
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire import peer

ALIASES_MAX = 1024


class LinkTable:
    def __init__(self, me: NodeRef, config: PeerConfig, alarm: Alarm | None = None) -> None:
        self.me = me
        self.config = config
        self._links: dict[str, Link] = {}
        self._conns: dict[int, PeerConn] = {}
        self._dialling: set[str] = set()  # addresses with a Connect outstanding
        self._aliases: dict[str, str] = {}  # dialled address -> the address the peer advertises
        # a link's one live timer (its handshake deadline or its next ping), and each challenged
        # connection's PEER_AUTH deadline
        self.timers: Deadlines[LinkTimer | AuthTimer] = Deadlines(alarm)  # (alarm: the broker's, core/deadlines.py)
        self._reports: list[RttMeasured | PeerUnreachable] = []  # handed out with the next output
        self.messages_dropped = 0  # on every link, also those since forgotten
        self.last_failure = ""  # the last link dropped and why, for status and logs
        self.refusals: dict[tuple[str, str], int] = {}  # (side, reason) -> handshakes refused

    def owns(self, conn: int) -> bool:
        return conn in self._conns

    def held_bytes(self, conn: int) -> int:
        """The bytes `conn` holds in a partial frame (0 once it is closing)."""
        c = self._conns.get(conn)
        return 0 if c is None or c.closing else c.decoder.held_bytes

    def address_of(self, conn: int) -> str | None:
        """The peer a connection of ours leads to (as far as its handshake has told)."""
        c = self._conns.get(conn)
        return None if c is None else c.address

    def congested(self, address: str) -> bool:
        """The link to `address` is OPEN but its connection's send buffer is past its high-water
        mark: what is sent to it now waits in its bounded queue (and past that is dropped)."""
        link = self._link(address)
        return link is not None and link.state == OPEN and link.blocked

    def speaks(self, address: str, version: int) -> bool:
        """The link to `address` is OPEN and speaks peer protocol `version` or later (wire/peer.py
        "Versions": what each adds). A peer not linked now is taken for the oldest."""
        link = self._link(address)
        return link is not None and link.state == OPEN and link.version >= version

    def complete_nacks(self, address: str) -> bool:
        """The broker at `address` understands a complete NACK (its link speaks COMPLETE_NACKS)."""
        return self.speaks(address, peer.COMPLETE_NACKS)

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def status(self) -> list[dict[str, Any]]:
        return [link.status() for link in sorted(self._links.values(), key=lambda lk: lk.address)]

    def refusals_status(self) -> dict[str, dict[str, int]]:
        """Handshakes refused since start, by side (ACCEPTOR_SIDE, DIALLER_SIDE) and reason."""
        out: dict[str, dict[str, int]] = {ACCEPTOR_SIDE: {}, DIALLER_SIDE: {}}
        for (side, reason), count in sorted(self.refusals.items()):
            out[side][reason] = count
        return out

    def _flush(self, link: Link) -> list[Effect]:
        conn = link.conn
        assert conn is not None
        return [Send(conn, data) for data in link.take_queue()]

    def _rename(self, link: Link, address: str) -> None:
        """The peer advertises another address than the one we dialled: key the link by the
        advertised one (the address others know it by), and remember the dialled one as an alias."""
        old = link.address
        del self._links[old]
        if len(self._aliases) >= ALIASES_MAX:
            self._aliases.clear()
        self._aliases[link.address] = address
        link.address = address
        self._links[address] = link
        if link.conn is not None:
            self._conns[link.conn].address = address
        when = self.timers.when(LinkTimer(old))
        if when is not None:
            self.timers.cancel(LinkTimer(old))
            self.timers.set(LinkTimer(address), when)

    def _link(self, address: str) -> Link | None:
        return self._links.get(self._aliases.get(address, address))

    def _dial(self, link: Link) -> list[Effect]:
        """Move `link` to DIALLING with one Connect out for its address. A dial of ours still out
        takes over: it may have been issued for a link since dropped (one that opened the other way
        while it was out, then failed, or that the peer closed after its handshake timeout), and
        its Connected or ConnectFailed is still to come."""
        link.conn = None
        link.move(DIALLING)
        self.timers.cancel(LinkTimer(link.address))
        if link.address in self._dialling:
            return []
        self._dialling.add(link.address)
        return [Connect(link.address)]

    def _redial(self, link: Link) -> list[Effect]:
        return self._dial(link)

    def _enqueue(self, link: Link, data: bytes) -> None:
        if not link.enqueue(data, self.config.peer_queue_bytes_max):
            self.messages_dropped += 1

    def _arm(self, link: Link, when: int) -> None:
        self.timers.set(LinkTimer(link.address), when)

    def _close(self, c: PeerConn, code: str, text: str) -> list[Effect]:
        c.closing = True
        c.decoder.clear()  # nothing more is read
        return [Send(c.conn, peer.peer_error(code, text)), Disconnect(c.conn, text)]

    def _refused(self, conn: int, address: str, side: str, reason: str, detail: str) -> PeerRefused:
        """Count one refused handshake; the effect tells the runtime, which logs it."""
        key = (side, reason)
        self.refusals[key] = self.refusals.get(key, 0) + 1
        return PeerRefused(conn, address, side, reason, detail)

    def _refuse(self, c: PeerConn, refusal: Refusal) -> list[Effect]:
        """Refuse the connection `c` that dialled us: count and report it, tell the dialler why
        (unless it told us first: `tell`), and close."""
        code, reason, text, tell = refusal
        refused = self._refused(c.conn, c.address, ACCEPTOR_SIDE, reason, text)
        self.last_failure = f"{c.address}: refused ({reason}): {text}"
        c.closing = True
        c.decoder.clear()  # nothing more is read
        # each list: what the dialler is told, the refusal for the runtime, the close
        return [*([Send(c.conn, peer.peer_error(code, text))] if tell else []), refused, Disconnect(c.conn, text)]

    def _refuse_dialled(self, c: PeerConn, link: Link, refusal: Refusal) -> list[Effect]:
        """The broker we dialled failed our check in the handshake: count, report, close, drop."""
        code, reason, detail, _ = refusal
        send, close = self._close(c, code, detail)
        refused = self._refused(c.conn, link.address, DIALLER_SIDE, reason, detail)
        if link.conn == c.conn:
            self._drop(link, detail)
        return [send, refused, close]

    def _fail(self, c: PeerConn, link: Link, code: str, text: str) -> list[Effect]:
        """`c` broke the protocol: tell the peer, close, and drop the link if `c` carried it."""
        out = self._close(c, code, text)
        if link.conn == c.conn:
            self._drop(link, f"protocol error ({code}): {text}")
        return out

    def _drop(self, link: Link, reason: str, report: bool = True) -> None:
        """Forget the link and its queue, and report its peer unreachable."""
        del self._links[link.address]
        self.timers.cancel(LinkTimer(link.address))
        for dialled in [a for a, advertised in self._aliases.items() if advertised == link.address]:
            del self._aliases[dialled]  # a new link to a dialled address is keyed by it again
        self.messages_dropped += len(link.queue)
        self.last_failure = f"{link.address}: {reason}"
        if report:
            self._reports.append(PeerUnreachable(link.address))

    def _output(self, msgs: list[PeerMessage], effects: list[Effect]) -> list[LinkOutput]:
        """The effects, then the messages, then the reports held since the last output."""
        out: list[LinkOutput] = [*effects, *msgs, *self._reports]
        self._reports = []
        return out
