"""The overlay as both reads of the data source see it: its pubends, where each is logged, and
connections that stay at the broker they were opened to.

Theory of operation. A pubend's events are logged once, by the broker that gave them their ticks,
and a bounded read `(after, end]` at a broker serves that broker's own pubend log. So a read of the
whole overlay needs, per pubend, the address of the broker that logs it:

- **Discovery** walks the brokers' leaf sets from the broker the user named. Each broker's leaf set
  holds its neighbours on both sides of the id ring, so the walk reaches every live member; each
  broker answers STATUS with its pubend, its durable tail (`last_tick`), its oldest retained tick
  (`first_tick`) and its released prefix (`released_through`): a `Head`.
- **The directory.** A leaf set drops a crashed broker within a second, so the walk alone cannot
  tell a pubend whose broker is down from no pubend at all. Every broker also holds the overlay's
  pubend directory (core/broker/directory.py): every pubend, the address that logs it, and what its log
  held when last heard of, also while its broker is down. The walk visits the addresses it lists
  too, and `survey` returns, beside the Heads, each listed pubend that could not be reached at its
  address (`Missing`, with the directory's view of its log), for the caller to judge
  (spark/coverage.py).
- **Connections stay put.** A broker may advise a client to move to a closer broker (route advice).
  A read that followed it would be served by another broker's log, so another pubend's events:
  silently wrong rows. Every connection here is opened with `follow_advice=False`, and a reader
  checks, once connected, that the broker still logs the pubend it planned for (a broker replaced
  under the same address starts a new pubend).

A broker that cannot be reached and that no directory lists is the caller's to judge
(`unreachable`): the streaming read holds its pubend back until it is back, the batch read fails
rather than return a snapshot without it.
The walk is bounded by MEMBERS_MAX brokers. Log lines go to the logger `tidings.spark`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

from tidings.core.errors import TidingsError
from tidings.spark.planning import ReadError

logger = logging.getLogger("tidings.spark")

SERVICE = "spark"  # the source name the data source's connections present to the brokers
MEMBERS_MAX = 1024  # brokers one discovery visits
TICK_MARKS_MAX = 256  # tick marks accepted from one broker (a broker reports TICK_MARKS - 1 = 31)


class Reach(Protocol):
    """What a connection needs of a read's options (batch or streaming)."""

    @property
    def broker(self) -> str: ...

    @property
    def credential(self) -> str | None: ...

    @property
    def tls_ca(self) -> str | None: ...


Connect = Callable[[Any, str, str], Any]  # (options, address, instance) -> a context-managed client
Unreachable = Callable[[str, BaseException], None]  # (address, why): raise to stop the walk


@dataclass(frozen=True, slots=True)
class Head:
    """One pubend as its broker reports it."""

    address: str  # the broker that logs it (bounded reads of its ticks go there)
    last_tick: int  # its durable tail (0: nothing logged)
    released_through: int  # every tick at or below this was released (0: none)
    first_tick: int | None = None  # its oldest retained tick; None when nothing is retained
    marks: tuple[int, ...] = ()  # ticks cutting its log into runs of about equal bytes (planning.split_at_marks)
    last_event: int | None = None  # its newest logged event's tick (None: a broker that does not say)
    records: int | None = None  # records its log retains (None: not reported); planning.balance cuts by them


def connect(opts: Reach, address: str, instance: str) -> Any:
    """A blocking connection to the broker at `address` that stays there (see the module doc)."""
    from tidings import sync  # noqa: PLC0415  (imported late: executors import this module)

    tls: Any = False
    if opts.tls_ca is not None:
        from tidings.aio.tls import client_context  # noqa: PLC0415

        tls = client_context(Path(opts.tls_ca))
    return sync.connect(address, service=SERVICE, instance=instance, credential=opts.credential, tls=tls,
                        follow_advice=False)


def check_pubend(client: Any, pubend: str, address: str) -> None:
    """Fail unless the broker `client` is connected to logs `pubend`."""
    if client.pubend != pubend:
        raise ReadError(f"the broker at {address} now logs pubend {client.pubend}, not {pubend}: "
                        "was it replaced? its old events cannot be read there")


@dataclass(frozen=True, slots=True)
class Missing:
    """A pubend the directory lists that could not be read at its address: its broker is down,
    or the broker there now logs another pubend. The rest is the directory's view of its log when
    its broker last announced it."""

    pubend: str
    address: str
    why: str  # "not reachable (...)", "the broker there now logs pubend ..."
    tail: int  # its durable tail then
    last_event_tick: int  # its newest event then (0: none)
    first_tick: int | None  # its oldest retained event then (None: none)
    released_through: int  # what retention had released then
    records: int  # the events its log retained then


@dataclass(frozen=True, slots=True)
class Survey:
    """The overlay's pubends at one moment: those reached, and those the directory lists that
    were not."""

    heads: dict[str, Head]
    missing: dict[str, Missing]


def survey(opts: Reach, connect_to: Connect = connect, unreachable: Unreachable | None = None) -> Survey:
    """Every pubend of the overlay `opts.broker` belongs to: those reached with their Heads, and
    those the pubend directory lists that were not.

    `opts.broker` itself must answer (its error is raised). Another broker that cannot be reached
    and whose pubend no directory names is passed to `unreachable`, which may raise; by default it
    is logged and left out.
    """
    pending, seen, heads = [opts.broker], set[str](), dict[str, Head]()
    listed: dict[str, Missing] = {}  # the directories' entries, the newest version of each pubend
    versions: dict[str, int] = {}
    failed: dict[str, str] = {}  # address -> why it could not be reached
    at: dict[str, str] = {}  # address -> the pubend it logs (reached)
    while pending:
        address = pending.pop(0)
        if address in seen:
            continue
        seen.add(address)
        if len(seen) > MEMBERS_MAX:
            raise ReadError(f"the overlay has more than {MEMBERS_MAX} brokers; the read cannot plan over it")
        try:
            with connect_to(opts, address, "planner") as client:
                status = client.status()
        except (OSError, TimeoutError, TidingsError) as exc:
            if address == opts.broker:
                raise
            failed[address] = f"not reachable ({exc})"
            continue
        pubend, head, members = read_status(address, status)
        heads.setdefault(pubend, head)
        at[address] = pubend
        overlay = status.get("overlay")
        if isinstance(overlay, dict) and isinstance(overlay.get("address"), str):
            seen.add(overlay["address"])
            at[overlay["address"]] = pubend
        for version, entry in read_directory(address, status):
            if version > versions.get(entry.pubend, -1):
                versions[entry.pubend], listed[entry.pubend] = version, entry
                pending.append(entry.address)
        pending += members
    missing = {}
    for pubend, entry in sorted(listed.items()):
        if pubend in heads:
            continue
        why = failed.get(entry.address) or f"gone: the broker there now logs pubend {at.get(entry.address)}"
        missing[pubend] = replace(entry, why=why)
    named = {m.address for m in missing.values()}
    for address, why in failed.items():
        if address not in named and address not in at:
            (unreachable or _log_unreachable)(address, OSError(why))
    return Survey(heads, missing)


def _log_unreachable(address: str, exc: BaseException) -> None:
    logger.warning("tidings: broker %s of the overlay is not reachable (%s): its events are read when "
                   "it is back", address, exc)


def read_status(address: str, status: dict[str, Any]) -> tuple[str, Head, list[str]]:
    """A broker's pubend, its Head and the members it knows, checked (the broker is a peer)."""
    pubend, last, released = status.get("pubend"), status.get("last_tick"), status.get("released_through")
    first = status.get("first_tick")
    if (type(pubend) is not str or not pubend or not _tick(last) or not _tick(released or 0)
            or not (first is None or _tick(first))):
        raise ReadError(f"the broker at {address} sent a malformed status (pubend={pubend!r}, "
                        f"first_tick={first!r}, last_tick={last!r}, released_through={released!r})")
    assert isinstance(last, int)
    if first is not None and first > last:
        raise ReadError(f"the broker at {address} sent an inconsistent status: first_tick={first}, "
                        f"last_tick={last}")
    marks = status.get("tick_marks", [])  # absent from an older broker
    if (type(marks) is not list or len(marks) > TICK_MARKS_MAX or not all(map(_tick, marks))
            or any(a >= b for a, b in pairwise(marks))):
        raise ReadError(f"the broker at {address} sent malformed tick_marks {marks!r:.80} (expected at most "
                        f"{TICK_MARKS_MAX} rising ticks)")
    records = status.get("log_records")  # absent from an older broker
    if records is not None and not _tick(records):
        raise ReadError(f"the broker at {address} sent a malformed status (log_records={records!r})")
    overlay = status.get("overlay")
    members: list[str] = []
    if isinstance(overlay, dict):
        for item in [*overlay.get("leaf_set", []), *overlay.get("neighbours", [])]:
            if isinstance(item, list) and len(item) >= 2 and isinstance(item[1], str):
                members.append(item[1])
    last_event = status.get("last_event_tick")
    return pubend, Head(address, last, released or 0, first, tuple(marks),
                        last_event if _tick(last_event) else None, records), members


def read_directory(address: str, status: dict[str, Any]) -> list[tuple[int, Missing]]:
    """The pubend directory in a broker's status, checked: (version, entry) for each pubend listed
    (an older broker has none)."""
    items = status.get("directory", [])
    out = []
    for item in items if type(items) is list else [None]:
        fields = [item.get(k) if isinstance(item, dict) else None for k in
                  ("pubend", "address", "tail", "last_event_tick", "first_tick", "released_through", "records",
                   "version")]
        pubend, where, tail, last, first, released, records, version = fields
        ticks_ok = all(map(_tick, (tail, last, released, records, version))) and (first is None or _tick(first))
        if type(pubend) is not str or not pubend or type(where) is not str or not where or not ticks_ok:
            raise ReadError(f"the broker at {address} sent a malformed pubend directory entry {item!r:.200}")
        assert isinstance(version, int)
        out.append((version, Missing(pubend, where, "", tail, last, first, released, records)))  # type: ignore[arg-type]
    return out


def _tick(value: object) -> bool:
    return type(value) is int and value >= 0
