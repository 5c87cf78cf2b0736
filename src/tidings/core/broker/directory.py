"""The pubend directory: every pubend of the overlay, where it is logged, how far, and what it
released, known to every broker, also while the pubend's own broker is down.

Theory of operation. A pubend's events live in one log, at the broker that gave them their ticks.
A reader of the whole overlay (the Spark batch read, an AvailableNow run) must therefore know
every pubend, including those whose broker has crashed: Pastry's leaf sets drop a crashed node
within a second, so a walk over the live members cannot tell "no such pubend" from "its broker is
down" and a read through the survivors would silently hold only their events. The directory is the
overlay's memory of its pubends, in the spirit of Scribe's root metadata, which the root replicates
in its leaf set so that it outlives the root:

- **Entries.** One per pubend: the address of the broker that logs it, its durable tail, the
  newest and oldest ticks its log holds, what retention released, how many records it retains,
  and a *version*: the wall-clock microsecond at which it was issued, and always above every
  version of that pubend the issuer had seen (a hybrid clock: a broker whose clock is behind still
  issues newer versions). Only the pubend's own broker issues LISTED entries; any broker may issue
  a FORGOTTEN one (a tombstone) for an operator.
- **Merge.** Of two entries for a pubend the one with the greater `order()` wins (version first,
  then the other fields, so that ties are settled the same way everywhere): a join semilattice,
  so merges commute, associate and are idempotent, and every broker that has heard the same
  entries holds the same directory, whatever the order it heard them in.
- **Gossip.** Every `announce_interval_ns` a broker refreshes its own entry (a new version when
  its log gained, retained or released events, or its address changed, or `refresh_interval_ns`
  passed) and sends each entry that changed since the last round (its own and the ones it learnt)
  to the members of its leaf set, in DIRECTORY messages of at most `message_entries_max` entries.
  The leaf sets chain the ring, so an entry reaches every broker. A member new to the leaf set
  gets the whole directory at once, and every `sync_interval_ns` one leaf-set member in turn gets
  it again (anti-entropy: what a dropped link lost comes back).
- **Crashes.** The directory is saved (SaveDirectory, atomically, in the data directory) at most
  every `save_interval_ns` when it changed, and handed back at start: a restarted broker forgets
  nothing, and its own next version is above the saved one.
- **Removal.** An entry leaves the directory only by an operator's `forget` (a FORGOTTEN
  tombstone, newer than the entry, gossiped like any entry) or when it was not refreshed for
  `entry_age_ns_max` (30 days: a decommissioned broker's pubend, never forgotten by hand); a
  tombstone ages out the same way, after every copy of what it forgot. A pubend whose broker is
  alive re-issues its entry above a tombstone it hears of, so forgetting a live pubend does not
  last. An entry aged out is not taken back from a peer that still holds it.

Invariants: a broker's own entry is LISTED and its version never goes down; `entries_max` bounds
the directory (a pubend beyond it is refused and counted, never one already held); nothing here
reads a clock: `now` (monotonic) drives the round's timer (one `Deadlines`, the one timer contract
of core/deadlines.py) and the wall clock, an input of its own (`wall_clock`, given with every input
of the broker that carries one), the versions and ages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, NamedTuple

import msgpack

from tidings.core import defaults
from tidings.core.clock import WallClock
from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.effects import SaveDirectory
from tidings.core.errors import BAD_MESSAGE, ProtocolError, TidingsError
from tidings.core.event import TICK_MAX
from tidings.core.inputs import LogState
from tidings.core.overlay.envelope import PeerSend
from tidings.core.overlay.node_id import NodeRef
from tidings.core.reliability.messages import PUBEND_BYTES_MAX
from tidings.core.units import ns_to_us
from tidings.core.wire.typed import name
from tidings.core.wire.types import BrokerType

ADDRESS_BYTES_MAX = 300  # host:port, an IPv6 literal in brackets included
FORMAT = 1  # of the saved directory

REFRESH_INTERVAL_NS = 3600 * 10**9  # an hour: well within the age bound, and little traffic for a quiet overlay


class EntryState(Enum):
    LISTED = "listed"  # the pubend exists, logged at `address` (its broker may be down)
    FORGOTTEN = "forgotten"  # an operator removed it (a tombstone, kept until it ages out)


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """One pubend as the overlay last heard of it from its broker."""

    pubend: str
    address: str  # the broker that logs it: bounded reads of its ticks go there
    tail: int  # its durable tail when announced: no event of it at or below this tick is unknown here
    last_event_tick: int  # the newest tick its log held (0: none ever)
    first_tick: int | None  # the oldest tick it retained (None: nothing retained)
    released_through: int  # every tick at or below this was released by retention (0: none)
    records: int  # records its log retained
    version: int  # issued at this wall-clock microsecond, above every earlier version of the pubend
    state: EntryState = EntryState.LISTED

    def order(self) -> tuple[Any, ...]:
        """The merge's total order: the greater entry of a pubend wins everywhere."""
        return (self.version, self.state is EntryState.FORGOTTEN, self.address, self.tail, self.last_event_tick,
                -1 if self.first_tick is None else self.first_tick, self.released_through, self.records)

    @property
    def listed(self) -> bool:
        return self.state is EntryState.LISTED

    def to_wire(self) -> list[Any]:
        return [self.pubend, self.address, self.tail, self.last_event_tick, self.first_tick,
                self.released_through, self.records, self.version, self.state is EntryState.FORGOTTEN]

    @classmethod
    def from_wire(cls, item: object) -> DirectoryEntry:
        """An entry a peer sent (or the saved state holds), checked; ProtocolError otherwise."""
        if type(item) is not list or len(item) != 9:
            raise _bad("an entry is [pubend, address, tail, last, first, released, records, version, forgotten]")
        pubend, address, tail, last, first, released, records, version, forgotten = item
        if type(forgotten) is not bool:
            raise _bad("an entry's forgotten flag is a boolean")
        entry = cls(name(pubend, PUBEND_BYTES_MAX, "a pubend", _bad),
                    name(address, ADDRESS_BYTES_MAX, "an address", _bad),
                    _tick(tail), _tick(last), None if first is None else _tick(first), _tick(released),
                    _tick(records), _tick(version), EntryState.FORGOTTEN if forgotten else EntryState.LISTED)
        if entry.first_tick is not None and entry.first_tick > entry.last_event_tick:
            raise _bad(f"entry of {pubend}: first tick {first} after its last {last}")
        return entry


def merge(a: DirectoryEntry, b: DirectoryEntry) -> DirectoryEntry:
    """The entry two brokers agree on for one pubend (commutative, associative, idempotent)."""
    assert a.pubend == b.pubend
    return a if a.order() >= b.order() else b


def _tick(value: object) -> int:
    if type(value) is int and 0 <= value <= TICK_MAX:
        return value
    raise _bad(f"{value!r:.40} is not a tick (an integer from 0 to 2^63 - 1)")


def _bad(what: str) -> ProtocolError:
    return ProtocolError(BAD_MESSAGE, f"directory: {what}")


class DirectoryError(TidingsError):
    """An operator's request the directory refuses (an unknown pubend, this broker's own)."""

    code = "directory"


@dataclass(frozen=True, slots=True)
class DirectoryConfig:
    # a gossip round: own entry refreshed, changes sent on
    announce_interval_ns: int = defaults.DIRECTORY_ANNOUNCE_INTERVAL_NS
    refresh_interval_ns: int = REFRESH_INTERVAL_NS  # an unchanged own entry is re-issued this often (the age bound)
    sync_interval_ns: int = defaults.DIRECTORY_SYNC_INTERVAL_NS  # the whole directory to one leaf-set member in turn
    save_interval_ns: int = 1_000_000_000  # at most one SaveDirectory per interval, when it changed
    # an entry (or tombstone) not re-issued for this long goes
    entry_age_ns_max: int = defaults.DIRECTORY_ENTRY_AGE_NS_MAX
    entries_max: int = 4096  # pubends held; a new one beyond is refused (and counted)
    message_entries_max: int = 256  # entries per DIRECTORY message

    def __post_init__(self) -> None:
        if not 0 < self.refresh_interval_ns < self.entry_age_ns_max // 2:
            raise ValueError("a live pubend's entry must be re-issued well within entry_age_ns_max")


LocalState = Callable[[], tuple[int, LogState]]  # this broker's pubend: (durable tail, its log)
DirectoryEffect = PeerSend | SaveDirectory


class RoundTimer(NamedTuple):
    """The next gossip round is due (and with it the anti-entropy turn and the save, when due)."""


ROUND = RoundTimer()


class PubendDirectory:
    """The directory one broker holds, and its part in the gossip (see the module doc)."""

    def __init__(self, me: NodeRef, pubend: str, config: DirectoryConfig, local: LocalState,
                 saved: bytes | None = None, alarm: Alarm | None = None) -> None:
        """`saved`: what the last SaveDirectory saved (DirectoryError when it does not decode);
        `alarm`: the broker's earliest deadline, told when the round's timer moves (core/deadlines.py)."""
        self.me = me
        self.pubend = pubend
        self.config = config
        self._local = local
        self._entries: dict[str, DirectoryEntry] = {} if saved is None else decode(saved)
        self._dirty: dict[str, str | None] = {}  # pubend -> the address it was learnt from (not sent back)
        self._leaf: tuple[str, ...] = ()  # addresses of the leaf set's members, by nodeId
        self.timers: Deadlines[RoundTimer] = Deadlines(alarm)  # the next round, once started
        self.clock = WallClock()  # the broker's, at its latest input that had one (`wall_clock`; core/clock.py)
        self._next_sync = 0
        self._sync_turn = 0
        self._next_save = 0
        self._changed = False  # since the last save
        self._issued = False  # whether this broker issued its own entry since it started
        self._last_issued_us = 0  # when it last did
        self.refused = 0  # entries of new pubends refused at entries_max
        self.rejected = 0  # DIRECTORY messages from peers that did not decode
        self.aged_out = 0  # entries and tombstones gone after entry_age_ns_max

    # ---- inputs ----------------------------------------------------------------------------------

    def start(self, now: int) -> None:
        """Start the rounds; the first issues this broker's own entry, above any saved one (the
        wall clock comes with the timer)."""
        self.timers.set(ROUND, now)
        self._next_sync = now + self.config.sync_interval_ns
        self._issued = False

    @property
    def wall_us(self) -> int:
        return self.clock.us

    def wall_clock(self, wall_us: int) -> None:
        """The broker's wall clock at its latest input that had one: versions are issued, and
        entries aged, by it."""
        self.clock.us = wall_us

    def leaf_set_changed(self, now: int, members: Sequence[NodeRef]) -> list[DirectoryEffect]:
        """Members new to the leaf set get the whole directory."""
        addresses = tuple(m.address for m in members if m.address != self.me.address)
        new = [a for a in addresses if a not in self._leaf]
        self._leaf = addresses
        return [send for address in new for send in self._send_all(address)]

    def received(self, now: int, sender: str, message: list[Any]) -> list[DirectoryEffect]:
        """A DIRECTORY message from the peer at `sender`; ProtocolError when it is malformed."""
        if (type(message) is not list or len(message) != 2 or message[0] != BrokerType.DIRECTORY
                or type(message[1]) is not list):
            self.rejected += 1
            raise _bad("a DIRECTORY message is [DIRECTORY, [entry, ...]]")
        if len(message[1]) > self.config.message_entries_max:
            self.rejected += 1
            raise _bad(f"more than {self.config.message_entries_max} entries in one message")
        try:
            entries = [DirectoryEntry.from_wire(item) for item in message[1]]
        except ProtocolError:
            self.rejected += 1
            raise
        for entry in entries:
            self._learn(entry, sender, self.wall_us)
        return []

    def handle_timeout(self, now: int) -> list[DirectoryEffect]:
        """A gossip round: entries aged out, this broker's own refreshed, the changes sent on, a
        leaf-set member's anti-entropy turn and the save, when they are due."""
        if not self.timers.pop_due(now):
            return []
        wall_us = self.wall_us
        self.timers.set(ROUND, now + self.config.announce_interval_ns)
        self._age_out(wall_us)
        self._refresh(wall_us)
        out: list[DirectoryEffect] = []
        out += self._send_changes()
        if now >= self._next_sync and self._leaf:
            self._next_sync = now + self.config.sync_interval_ns
            self._sync_turn = (self._sync_turn + 1) % len(self._leaf)
            out += self._send_all(self._leaf[self._sync_turn])
        if self._changed and now >= self._next_save:
            self._next_save = now + self.config.save_interval_ns
            self._changed = False
            out.append(SaveDirectory(self.encode()))
        return out

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def forget(self, now: int, pubend: str) -> list[PeerSend]:
        """An operator removes `pubend` (its broker was decommissioned): a tombstone, gossiped."""
        self._put(tombstone(self._entries, pubend, self.pubend, self.wall_us), None)
        return self._send_changes()

    # ---- what the directory holds ----------------------------------------------------------------

    def entries(self) -> list[DirectoryEntry]:
        """Every pubend listed, by pubend id."""
        return [e for _, e in sorted(self._entries.items()) if e.listed]

    def get(self, pubend: str) -> DirectoryEntry | None:
        return self._entries.get(pubend)

    def status(self) -> dict[str, Any]:
        """For STATUS: the listed entries (what a Spark read plans over) and the counters."""
        listed = self.entries()
        return {"directory": [{"pubend": e.pubend, "address": e.address, "tail": e.tail,
                               "last_event_tick": e.last_event_tick, "first_tick": e.first_tick,
                               "released_through": e.released_through, "records": e.records,
                               "version": e.version} for e in listed],
                "directory_pubends": len(listed),
                "directory_forgotten": len(self._entries) - len(listed),
                "directory_refused": self.refused, "directory_rejected": self.rejected,
                "directory_aged_out": self.aged_out}

    def encode(self) -> bytes:
        return encode(self._entries)

    # ---- inside ----------------------------------------------------------------------------------

    def _refresh(self, wall_us: int) -> None:
        """A new version of this broker's own entry when anything in it changed (the tail alone
        moves with the clock: it goes out with the next change, or after refresh_interval_ns)."""
        tail, log = self._local()
        old = self._entries.get(self.pubend)
        fresh = DirectoryEntry(self.pubend, self.me.address, tail, log.last_tick, log.first_tick,
                               log.released_through, log.record_count, 0)
        due = not self._issued or wall_us - self._last_issued_us >= ns_to_us(self.config.refresh_interval_ns)
        if (old is not None and old.listed and not due
                and replace(old, tail=0, version=0) == replace(fresh, tail=0)):
            return
        self._issued, self._last_issued_us = True, wall_us
        version = wall_us if old is None else max(old.version + 1, wall_us)
        self._put(replace(fresh, version=version), None)

    def _learn(self, entry: DirectoryEntry, sender: str, wall_us: int) -> None:
        if self._aged(entry, wall_us):
            return
        held = self._entries.get(entry.pubend)
        if entry.pubend == self.pubend:
            if held is not None and entry.order() > held.order():  # a tombstone, or a copy from before a
                self._last_issued_us = wall_us                      # restart: ours goes above it
                self._put(replace(held, version=max(entry.version, held.version) + 1), None)
            return
        if held is None and len(self._entries) >= self.config.entries_max:
            self.refused += 1
            return
        if held is None or entry.order() > held.order():
            self._put(entry, sender)

    def _put(self, entry: DirectoryEntry, source: str | None) -> None:
        self._entries[entry.pubend] = entry
        self._dirty[entry.pubend] = source
        self._changed = True

    def _aged(self, entry: DirectoryEntry, wall_us: int) -> bool:
        return entry.pubend != self.pubend and wall_us - entry.version > ns_to_us(self.config.entry_age_ns_max)

    def _age_out(self, wall_us: int) -> None:
        for pubend in [p for p, e in self._entries.items() if self._aged(e, wall_us)]:
            del self._entries[pubend]
            self._dirty.pop(pubend, None)
            self.aged_out += 1
            self._changed = True

    def _send_changes(self) -> list[PeerSend]:
        """The entries changed since the last round, to every leaf-set member but their source."""
        if not self._dirty:
            return []
        dirty, self._dirty = self._dirty, {}
        out: list[PeerSend] = []
        for address in self._leaf:
            out += self._messages(address, (self._entries[p] for p in sorted(dirty)
                                            if p in self._entries and dirty[p] != address))
        return out

    def _send_all(self, address: str) -> list[PeerSend]:
        return self._messages(address, (e for _, e in sorted(self._entries.items())))

    def _messages(self, address: str, entries: Iterable[DirectoryEntry]) -> list[PeerSend]:
        wire = [e.to_wire() for e in entries]
        step = self.config.message_entries_max
        return [PeerSend(address, [BrokerType.DIRECTORY, wire[i:i + step]]) for i in range(0, len(wire), step)]


def tombstone(entries: dict[str, DirectoryEntry], pubend: str, own: str, wall_us: int) -> DirectoryEntry:
    """The FORGOTTEN entry that removes `pubend` from a directory holding `entries` (of the broker
    whose pubend is `own`); DirectoryError when it is not listed, or is `own`."""
    entry = entries.get(pubend)
    if pubend == own:
        raise DirectoryError(f"pubend {pubend} is this broker's own: it cannot be forgotten here")
    if entry is None or not entry.listed:
        raise DirectoryError(f"pubend {pubend} is not in the directory")
    return replace(entry, version=max(entry.version + 1, wall_us), state=EntryState.FORGOTTEN)


def forget_saved(data: bytes | None, pubend: str, own: str, wall_us: int) -> bytes:
    """A stopped broker's saved directory with `pubend` forgotten: started again, the broker
    gossips the tombstone and every broker drops the pubend (the operator's `tidings directory
    forget`). DirectoryError when it is not listed, or is the broker's own."""
    entries = {} if data is None else decode(data)
    entries[pubend] = tombstone(entries, pubend, own, wall_us)
    return encode(entries)


def encode(entries: dict[str, DirectoryEntry]) -> bytes:
    """The saved form of a directory (SaveDirectory), which `decode` reads back."""
    return msgpack.packb([FORMAT, [e.to_wire() for _, e in sorted(entries.items())]])


def decode(data: bytes) -> dict[str, DirectoryEntry]:
    """What `PubendDirectory.encode` saved; DirectoryError when it does not decode."""
    try:
        version, items = msgpack.unpackb(data)
        if version != FORMAT:
            raise DirectoryError(f"directory state of format {version!r}, this broker reads {FORMAT}")
        entries = [DirectoryEntry.from_wire(item) for item in items]
    except (ValueError, TypeError, ProtocolError, msgpack.exceptions.ExtraData) as exc:
        raise DirectoryError(f"the saved pubend directory does not decode: {exc}") from None
    return {e.pubend: e for e in entries}
