"""The consolidated stream's filtering at a subscriber's broker: which ticks matched which durable
registration, kept in the persistent filtering subsystem (PFS), and read back when one resumes.

Theory of operation (Gryphon durable §4.2, on our trees). While a tree has durable registrations at
this broker, connected or away, the reliability node keeps one more consumer on each of the tree's
input streams, the PFS consumer (node.py): it is handed every tick in order, as any local
subscription is, and never blocks. For each piece it is handed (`Recorded`) this machine matches the
D ticks' records against the tree's registrations and writes one PFS record per tick that matched at
least one (`PfsAppend`, one PFS stream per (tree, pubend)); every other tick of the piece is silence
for all of them. The registrations' interest stays in the tree's filter summary while they are away,
so the F ticks upstream sends are silence for them too.

Coverage. The PFS knows the matches of registration r on a stream only after `since[r]`: the tick
the stream's PFS consumer had reached when r was added (or the stream first reached this broker),
moved up past any hole in what the consumer was handed (a lost range, a restart of the stream).
Coverage lives in memory: a restarted broker starts its PFS empty (the runtime clears it), and its
durable subscribers are served by refiltering, as on a broker that never saw them.

Catchup. A durable subscription that resumes here from its token, on a stream where the token's
tick T lies inside its registration's coverage, asks the PFS (`ReadPfs`) which ticks after T matched
it. The answer (`answered`) tells the node which ticks of (T, through] its catchup needs; every other
unknown tick there becomes silence for it (`Istream.sparsen`), so only the matching ticks are nacked
upstream and nothing that did not match is fetched or filtered again. Without coverage, or when the
read fails, the catchup nacks everything after T, as before (correct, only slower).

Chopping: at each durable save, a stream's records at or below the smallest released tick of its
tree's registrations go (`PfsChop`); a tree without registrations loses its streams.

The reliability node (node.py) is this machine's only partner, once the broker is in an overlay
(`start`). Which registrations are recorded is decided here: all of them, with `durable_pfs`, but
for one whose saved filter no longer parses (its catchup refilters). This machine tells the node
what it decided (`record`, `unrecord`, `await_pfs`, `pfs_answered`), and hands each of the node's
answers to the broker's `carry_out` before the next call, so that a `Recorded` piece it causes is
back here before the next registration is added (its coverage starts after that piece). Outside an
overlay nothing is recorded, and nothing is asked of a node.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.durable.registrations import Registration
from tidings.core.effects import PfsAppend, PfsChop, ReadPfs
from tidings.core.errors import TidingsError
from tidings.core.event import record_routing_fields
from tidings.core.filters import Filter, parse_filter
from tidings.core.filters.index import SubscriptionIndex
from tidings.core.inputs import PfsAnswered

if TYPE_CHECKING:  # the node's effects, which the broker carries out (the node imports this module)
    from tidings.core.reliability.node import NodeEffect

READ_TICKS_MAX = 10_000  # matched ticks one catchup read returns (after the last, its span is fetched whole)
READS_MAX = 1024  # reads in flight
READ_WAIT_NS = 5_000_000_000  # a catchup's nacks wait at most this long for its PFS read


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the PFS consumer of the (tree, pubend) stream was handed: (after, through], D at
    `ticks` with `records`, F elsewhere; or, when `lost`, released ticks the PFS cannot speak for."""

    tree: str
    pubend: str
    after: int
    through: int
    ticks: list[int]
    records: list[bytes]
    lost: bool


@dataclass(frozen=True, slots=True)
class Catchup:
    """Of (after, through] of `pubend` on `tree`, local subscription `key` needs only `ticks`."""

    key: int
    tree: str
    pubend: str
    after: int
    through: int
    ticks: tuple[int, ...]


class PfsNode(Protocol):
    """What this machine tells the reliability node (node.py, its PFS consumer and catchups)."""

    def record(self, now: int, tree: str, registration: int, pattern: str, filter_text: str) -> list[NodeEffect]: ...

    def unrecord(self, now: int, tree: str, registration: int) -> list[NodeEffect]: ...

    def await_pfs(self, now: int, span: Catchup) -> None: ...

    def pfs_answered(self, now: int, span: Catchup, answer: Catchup | None) -> tuple[int, list[NodeEffect]]: ...


@dataclass(slots=True)
class _Coverage:
    through: int  # every tick up to here was recorded
    since: dict[int, int]  # registration -> its matches are recorded after this tick
    chopped: int = 0


@dataclass(slots=True)
class _Member:
    tree: str
    pattern: str
    filter: Filter | None


@dataclass(slots=True)
class Constream:
    read_ticks_max: int = READ_TICKS_MAX
    node: PfsNode | None = None  # the reliability node, once the broker is in an overlay
    enabled: bool = False  # registrations are recorded (durable_pfs)
    _members: dict[int, _Member] = field(default_factory=dict)
    # tree -> its registrations (in the order they came), and which of them an event matches
    _trees: dict[str, SubscriptionIndex] = field(default_factory=dict)
    _coverage: dict[tuple[str, str], _Coverage] = field(default_factory=dict)
    _reads: dict[int, Catchup] = field(default_factory=dict)  # reader -> the span its catchup waits on
    _next_reader: int = 0
    records_written: int = 0
    catchups: int = 0  # catchup reads answered
    ticks_silenced: int = 0  # ticks catchups did not fetch because the PFS said they did not match

    @staticmethod
    def stream(tree: str, pubend: str) -> str:
        """The PFS stream of (tree, pubend): a fixed-length name, whatever the tree's length."""
        return hashlib.blake2b(f"{tree}\0{pubend}".encode(), digest_size=16).hexdigest()

    def recording(self, tree: str) -> bool:
        return tree in self._trees

    # ---- with the reliability node: the broker's calls ---------------------------------------------

    def start(self, now: int, node: PfsNode, enabled: bool, registrations: Iterable[Registration],
              carry_out: Callable[[list[NodeEffect | PfsChop]], object]) -> None:
        """The broker joined an overlay with `node`; with `enabled` (durable_pfs) its saved
        `registrations` are recorded from now on (the PFS is empty after a restart)."""
        self.node, self.enabled = node, enabled
        self.registered(now, registrations, (), carry_out)

    def registered(self, now: int, added: Iterable[Registration], dropped: Iterable[Registration],
                   carry_out: Callable[[list[NodeEffect | PfsChop]], object]) -> None:
        """Registrations `added` are recorded from now on (those this broker records), `dropped`
        no longer are. The node's effects and the chops go to `carry_out`, one call's at a time."""
        if self.node is None:
            return
        for reg in added if self.enabled else ():
            try:
                flt = parse_filter(reg.filter) if reg.filter else None
            except TidingsError:
                continue  # (saved by a broker that parsed it): not recorded, its catchup refilters
            self.add(reg.tree, reg.number, reg.pattern, flt)
            carry_out([*self.node.record(now, reg.tree, reg.number, reg.pattern, reg.filter)])
        for reg in dropped:
            carry_out([*self.remove(reg.number), *self.node.unrecord(now, reg.tree, reg.number)])

    def resume(self, now: int, key: int, registration: Registration | None, start: Checkpoint, pattern: str,
               flt: Filter | None) -> list[ReadPfs]:
        """Local subscription `key` resumed `registration` (None: it made a new one) from `start`:
        the PFS reads its catchup waits on (`catchup`), the node told to wait for them."""
        if registration is None or self.node is None:
            return []
        out: list[ReadPfs] = []
        for read, span in self.catchup(key, registration.number, start, pattern, "" if flt is None else flt.text):
            self.node.await_pfs(now, span)
            out.append(read)
        return out

    def pfs_answered(self, inp: PfsAnswered) -> list[NodeEffect]:
        """A catchup's PFS read: the node fetches only the ticks that matched it (its effects)."""
        answered = self.answered(inp)
        if answered is None or self.node is None:
            return []
        silenced, effects = self.node.pfs_answered(inp.now, *answered)
        self.ticks_silenced += silenced
        return effects

    # ---- the data: registrations, records, reads ---------------------------------------------------

    def add(self, tree: str, registration: int, pattern: str, flt: Filter | None) -> None:
        """Registration `registration` of `tree` is recorded from where each stream is now."""
        if registration in self._members:
            return
        self._members[registration] = _Member(tree, pattern, flt)
        self._trees.setdefault(tree, SubscriptionIndex()).add(registration, pattern, flt)
        for (t, _), cov in self._coverage.items():
            if t == tree:
                cov.since[registration] = cov.through

    def remove(self, registration: int) -> list[PfsChop]:
        """Registration `registration` ended; a tree without registrations loses its PFS streams."""
        member = self._members.pop(registration, None)
        if member is None:
            return []
        regs = self._trees[member.tree]
        regs.remove(registration)
        out: list[PfsChop] = []
        for key in [k for k in self._coverage if k[0] == member.tree]:
            self._coverage[key].since.pop(registration, None)
            if not regs:
                del self._coverage[key]
                out.append(PfsChop(self.stream(*key), None))
        if not regs:
            del self._trees[member.tree]
        return out

    def recorded(self, rec: Recorded) -> list[PfsAppend]:
        """The PFS records of what the PFS consumer of (rec.tree, rec.pubend) was handed."""
        regs = self._trees.get(rec.tree)
        if not regs:
            return []
        key = (rec.tree, rec.pubend)
        cov = self._coverage.get(key)
        if cov is None:
            cov = self._coverage[key] = _Coverage(rec.after, dict.fromkeys(regs, rec.after))
        elif rec.after > cov.through:  # a hole: nothing is known of what it skipped
            for r, since in cov.since.items():
                cov.since[r] = max(since, rec.after)
        if rec.lost:
            for r, since in cov.since.items():
                cov.since[r] = max(since, rec.through)
            cov.through = max(cov.through, rec.through)
            return []
        entries: list[tuple[int, list[int]]] = []
        match = regs.match  # (ids ascending, as a record's are written)
        for tick, record in zip(rec.ticks, rec.records, strict=True):
            if tick <= cov.through:
                continue  # recorded already (a rewound consumer)
            fields = record_routing_fields(record)
            if fields is None or fields.pubend != rec.pubend:
                continue  # never delivered to anyone (core/subscription/subscription.py): a match for nobody
            matched = match(fields.channel, fields.attributes)
            if matched:
                entries.append((tick, matched))
        if rec.through <= cov.through:
            return []
        cov.through = rec.through
        self.records_written += len(entries)
        return [PfsAppend(self.stream(rec.tree, rec.pubend), entries, rec.through)]

    def catchup(self, key: int, registration: int, start: Checkpoint, pattern: str,
                filter_text: str) -> list[tuple[ReadPfs, Catchup]]:
        """Local subscription `key` (`pattern`, `filter_text`) resumes registration `registration`
        from `start`: a PFS read for each stream of its tree whose coverage holds the token's tick,
        with the span the catchup's nacks wait on until it is answered (its `ticks` not known yet).
        Nothing when the registration was recorded with another pattern or filter: what matched
        it says nothing of what matches the subscription."""
        member = self._members.get(registration)
        if member is None or (member.pattern, "" if member.filter is None else member.filter.text) != (
                pattern, filter_text):
            return []
        out: list[tuple[ReadPfs, Catchup]] = []
        for (tree, pubend), cov in self._coverage.items():
            after = start.positions.get(pubend, start.default)
            since = cov.since.get(registration)
            if tree != member.tree or since is None or not since <= after < cov.through:
                continue
            if len(self._reads) >= READS_MAX:
                break  # the rest catch up densely
            self._next_reader += 1
            span = self._reads[self._next_reader] = Catchup(key, tree, pubend, after, cov.through, ())
            out.append((ReadPfs(self._next_reader, self.stream(tree, pubend), registration, after,
                                self.read_ticks_max), span))
        return out

    def answered(self, inp: PfsAnswered) -> tuple[Catchup, Catchup | None] | None:
        """The span a PFS read's catchup waited on, and what the answer lets it skip there (None
        when the read failed or says nothing: it refilters)."""
        span = self._reads.pop(inp.reader, None)
        if span is None:
            return None
        after = max(span.after, inp.released_through)
        if inp.through < 0 or inp.through <= after:
            return span, None
        self.catchups += 1
        return span, Catchup(span.key, span.tree, span.pubend, after, inp.through,
                             tuple(t for t in inp.ticks if t > after))

    def chop(self, registration: Callable[[int], Registration | None]) -> list[PfsChop]:
        """Records every registration of a stream's tree released may go (`registration`: the
        registration of a number, None when it ended)."""
        out: list[PfsChop] = []
        for (tree, pubend), cov in self._coverage.items():
            points = [0 if (r := registration(reg)) is None else r.released.positions.get(pubend, r.released.default)
                      for reg in self._trees.get(tree, ())]
            point = min(points, default=0)
            if point > cov.chopped:
                cov.chopped = point
                out.append(PfsChop(self.stream(tree, pubend), point))
        return out

    def status(self) -> dict[str, int]:
        return {"pfs_streams": len(self._coverage), "pfs_records_written": self.records_written,
                "pfs_catchups": self.catchups, "pfs_ticks_silenced": self.ticks_silenced}
