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
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tidings.core.units import us_to_ns


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
