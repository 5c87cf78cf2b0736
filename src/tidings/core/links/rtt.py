"""The RTT pinger of the peer links: PING and PONG over each OPEN link.

Theory of operation. An OPEN link sends PING at once and then every ping_interval_ns (its
`LinkTimer` stands for the next one); the PONG that carries the link's latest ping sequence number
gives `RttMeasured` (both ends of the measure are `now` values) for proximity neighbour selection,
and any frame from the peer counts as heard. A link silent for PING_MISSES_MAX intervals is down
(links/peer_links.py redials it). A PING is answered only while the link's connection is not
blocked, so a peer that does not read its PONGs gets no more of them. Sequence numbers are drawn
from one counter for all links, so a stale PONG (of an earlier ping, or of a replaced
connection) never measures.
"""

from __future__ import annotations

from tidings.core.deadlines import Deadlines
from tidings.core.effects import Send
from tidings.core.links.link import AuthTimer, Link, LinkTimer, RttMeasured
from tidings.core.wire import peer

PING_MISSES_MAX = 3  # an OPEN link silent for this many ping intervals is down


class Pinger:
    def __init__(self, timers: Deadlines[LinkTimer | AuthTimer], interval_ns: int) -> None:
        self._timers = timers  # the links' own: a link's one live timer is its handshake deadline or its ping
        self.interval_ns = interval_ns
        self._seq = 0

    def ping(self, now: int, link: Link) -> Send:
        """PING over the OPEN `link` now, and arm its next one."""
        assert link.conn is not None
        self._seq += 1
        link.ping_seq = self._seq
        link.ping_sent_at = now
        self._timers.set(LinkTimer(link.address), now + self.interval_ns)
        return Send(link.conn, peer.ping(link.ping_seq))

    def pong(self, now: int, link: Link, seq: int) -> RttMeasured | None:
        """A PONG `seq` on `link`: the RTT sample when it answers the link's latest PING."""
        if seq != link.ping_seq:
            return None
        link.rtt_ns = now - link.ping_sent_at
        return RttMeasured(link.address, link.rtt_ns)

    def silent(self, now: int, link: Link) -> bool:
        """Nothing heard from the peer over `link` for PING_MISSES_MAX ping intervals."""
        return now - link.heard_at >= PING_MISSES_MAX * self.interval_ns
