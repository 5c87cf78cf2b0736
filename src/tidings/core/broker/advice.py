"""Route advice (PsEPR §5.1.1, GES roaming): entry points that may serve a client better.

Theory of operation. A client connects to whichever broker it was given, which may be far from it,
busy, or about to stop. The broker knows better candidates: Pastry's neighbourhood set holds the
brokers nearest to it by measured round-trip time, and they are the likeliest to be near its
clients too. So a broker in an overlay sends ADVICE `[25, reason, [[address, rtt_us], ...]]` to a
client right after WELCOME, and again to every client when its reason changes:

- `closer`: sent once to every new client; a hint, to be followed only when one candidate is
  clearly closer to the client than this broker (the client measures: the broker's own RTTs are from
  where it stands, not from where the client does), and never to a broker on this broker's own host
  (its address's host part): two brokers of one machine are equally far from any client, and a
  difference measured between them is the host's load, not distance;
- `overloaded`: this broker has more client connections than `clients_advised_above`: move to any
  candidate that is not overloaded itself;
- `draining`: this broker is stopping (SIGTERM): move now.

The client side is `choose`: the client library connects to each candidate (at most
`CANDIDATES_MAX`, concurrently, bounded in time), timing HELLO to WELCOME exactly as it timed its
own connection, and reads the candidate's load from its WELCOME (`clients`, `overloaded`,
`draining`). Moving is the client library's business (tidings.client); this module holds only the
rules, so the broker, the client and the tests share them.

The broker's side is `RouteAdvice`: what its WELCOME says (the features it serves, its lease, and
the load a probing client reads), the reason of its advice, and the ADVICE frames; the composer
hands it the client count and the overlay's neighbours (ClusterMember.neighbours).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from tidings.core.effects import Send
from tidings.core.wire import messages

if TYPE_CHECKING:
    from tidings.core.config import BrokerConfig

from tidings.core.units import ns_to_us, us_to_ns


class Reason(Enum):
    CLOSER = "closer"
    OVERLOADED = "overloaded"
    DRAINING = "draining"


CANDIDATES_MAX = 8
RTT_UNKNOWN_NS = 10**9  # a candidate the broker knows (its leaf set) but has not timed
CLEARLY_CLOSER_RATIO = 0.5  # a candidate is followed for `closer` only at half the RTT or less ...
CLEARLY_CLOSER_NS_MIN = 2_000_000  # ... and at least 2 ms less: smaller differences are noise


@dataclass(frozen=True, slots=True)
class Candidate:
    address: str
    rtt_ns: int  # from the broker that advises it (what it knows), or from the client (a probe)


@dataclass(frozen=True, slots=True)
class Probe:
    """What the client measured of one candidate: its RTT from the client and its WELCOME's load."""

    address: str
    rtt_ns: int
    overloaded: bool
    draining: bool


def candidates(neighbours: list[tuple[str, int]], me: str) -> list[Candidate]:
    """The advice's candidates: the broker's nearest neighbours, nearest first, itself excluded."""
    out = [Candidate(address, rtt) for address, rtt in neighbours if address != me]
    return out[:CANDIDATES_MAX]


def host_of(address: str) -> str:
    """The host part of a `host:port` address (`[v6]:port` too)."""
    return address.rpartition(":")[0].strip("[]")


def choose(reason: Reason, current_rtt_ns: int, probes: list[Probe], current: str) -> str | None:
    """The address the client should move to from the broker at `current`, or None to stay."""
    healthy = sorted((p for p in probes if not p.overloaded and not p.draining
                      and (reason is not Reason.CLOSER or host_of(p.address) != host_of(current))),
                     key=lambda p: (p.rtt_ns, p.address))
    if not healthy:
        return None
    best = healthy[0]
    if reason is not Reason.CLOSER:
        return best.address
    clearly = (best.rtt_ns <= current_rtt_ns * CLEARLY_CLOSER_RATIO
               and current_rtt_ns - best.rtt_ns >= CLEARLY_CLOSER_NS_MIN)
    return best.address if clearly else None


def decode(reason: object, entries: object) -> tuple[Reason, list[Candidate]] | None:
    """An ADVICE's fields, or None when they are not advice (the client then ignores it)."""
    try:
        parsed = Reason(reason)
    except ValueError:
        return None
    if type(entries) is not list:
        return None
    out = [Candidate(e[0], us_to_ns(e[1])) for e in entries[:CANDIDATES_MAX]
           if type(e) is list and len(e) == 2 and type(e[0]) is str and type(e[1]) is int]
    return parsed, out


class RouteAdvice:
    """The broker's WELCOME info and route advice (see the module's docstring)."""

    __slots__ = ("clients_advised_above", "draining", "features")

    def __init__(self, pubend_id: str, config: BrokerConfig) -> None:
        self.clients_advised_above = config.clients_advised_above
        self.draining = False  # stopping: clients are advised to move
        self.features: dict[str, Any] = {  # WELCOME's info that does not change
            "pubend": pubend_id, "frame_bytes_max": config.frame_bytes_max,
            "event_bytes_max": config.event_bytes_max, "lease_ns": config.lease_ns,
            "bulk_read": True,  # READ is served (an older broker answers it unknown-message)
            # and may be answered with SPAN frames, which may hold batch records (storage/record.py); a
            # client older than batch records looks for "read_spans" only, so it never asks for them
            "span_batch": True}

    def drain(self) -> None:
        """The broker is stopping: from now on every advice says `draining`, and so does WELCOME."""
        self.draining = True

    def welcome_info(self, clients: int) -> dict[str, Any]:
        """WELCOME's info, with the load a client probing this broker for route advice reads."""
        return {**self.features, "clients": clients, "draining": self.draining,
                "overloaded": clients > self.clients_advised_above}

    def reason(self, clients: int) -> Reason:
        if self.draining:
            return Reason.DRAINING
        return Reason.OVERLOADED if clients > self.clients_advised_above else Reason.CLOSER

    def advise(self, conns: list[int], clients: int, me: str,
               neighbours: tuple[list[tuple[str, int]], list[str]] | None) -> list[Send]:
        """ADVICE to `conns`: this broker's nearest `neighbours` ((address, RTT) nearest first, and
        the leaf set's addresses; None outside a joined overlay), and why to move."""
        if neighbours is None:
            return []
        near, leaf_set = neighbours
        if self.draining:  # every live broker it knows will do, nearest first (RTT unknown: last)
            known = {address for address, _ in near}
            near = near + [(address, RTT_UNKNOWN_NS) for address in leaf_set if address not in known]
        entries = [[c.address, ns_to_us(c.rtt_ns)] for c in candidates(near, me)]
        if not entries:
            return []
        frame = messages.advice(self.reason(clients).value, entries)
        return [Send(conn, frame) for conn in conns]
