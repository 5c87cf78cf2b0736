"""The durable subscriptions a broker hosts, and what each has released (Gryphon durable §2-§4).

Theory of operation. A durable subscription is *registered* at the broker that hosts it (the
subscriber hosting broker): the registration remembers the subscription's tree and `released`, the
checkpoint through which the application consumed and acknowledged its events (`sub.ack`, the
RELEASE message; the paper's released(s, p), a vector because ticks are per pubend). It holds
release back at that checkpoint for every pubend (reliability/release.py), whether the subscriber
is connected or not, and keeps its broker on the tree while the subscriber is away. It ends when:

- the subscription resumes here from a token naming it (the same registration goes on);
- it resumes on another broker: that broker becomes its home and sends MOVED, and this one drops it;
- the application unsubscribes it (an explicit UNSUBSCRIBE ends a durable subscription);
- it has been disconnected for `durable_expiry_ns` (its token still resumes it, from what the
  pubends retain).

A registration may also have a *name* (JMS-style durable subscriptions, for clients that cannot
keep a token): (owner, name) finds it again at this broker, the owner being the client's service
(its authenticated identity's, with --auth). A named subscription resumes from what it last
acknowledged, so what was delivered after that comes again; it must be asked for with the same
pattern and filter, and by one connection at a time.

Registrations survive a crash of their broker: the broker saves them (SaveDurable) when they
change, at most every `durable_save_interval_ns`, together with the trees its own pubend holds
release on (`Source.held_trees`), and is handed them back at start. Times are wall-clock
microseconds, so expiry counts across restarts.

Invariants: a registration's `released` only moves up; `key` names the live subend serving it, or
is None while its subscriber is away (then `away_us` is when it left).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from tidings.core.durable.checkpoint import Checkpoint, TokenError
from tidings.core.errors import TidingsError

FORMAT = 1


class StateError(TidingsError):
    """The saved durable state does not decode: the broker refuses to start rather than forget
    what its disconnected durable subscribers hold."""


NAME_BYTES_MAX = 256
NAMED_REPORTED_MAX = 1000  # named registrations listed in the status (`tidings durable list`)


@dataclass(slots=True)
class Registration:
    number: int
    tree: str
    released: Checkpoint
    key: int | None  # the subend serving it while its subscriber is connected
    away_us: int = 0  # wall clock when its subscriber left (while `key` is None)
    name: tuple[str, str] | None = None  # (owner, name) of a broker-held (named) one
    pattern: str = ""  # a named one's pattern and filter, which a resume must repeat
    filter: str = ""


class Registrations:
    def __init__(self, expiry_us: int, registrations_max: int) -> None:
        self.expiry_us = expiry_us
        self.registrations_max = registrations_max
        self._regs: dict[int, Registration] = {}
        self._by_tree: dict[str, dict[int, Registration]] = {}
        self._names: dict[tuple[str, str], int] = {}
        self._next = 1
        self._held: dict[tuple[str | None, str], int | None] = {}  # cache of `held`
        self.held_trees: dict[str, int] = {}  # the pubend's, saved alongside (Source.held_trees)
        self.dirty = False
        self.expired_total = 0
        self.moved_total = 0

    def __len__(self) -> int:
        return len(self._regs)

    def get(self, number: int) -> Registration | None:
        return self._regs.get(number)

    def all(self) -> list[Registration]:
        return list(self._regs.values())

    def register(self, tree: str, released: Checkpoint, key: int, name: tuple[str, str] | None = None,
                 pattern: str = "", filter_text: str = "") -> Registration:
        """A new durable subscription of `tree` served by subend `key`, released through `released`
        (named `name`, with its pattern and filter); TidingsError past `registrations_max`."""
        if len(self._regs) >= self.registrations_max:
            raise TidingsError(f"this broker hosts durable_registrations_max ({self.registrations_max}) durable "
                               "subscriptions", "too-many-subscriptions")
        reg = Registration(self._next, tree, Checkpoint(released.default, dict(released.positions)), key,
                           name=name, pattern=pattern, filter=filter_text)
        self._next += 1
        self._add(reg)
        return reg

    def named(self, owner: str, name: str, pattern: str, filter_text: str) -> Registration | None:
        """The registration named `name` by `owner`, if any; TidingsError when it was made with
        another pattern or filter, or a connection is using it now."""
        if not 0 < len(name.encode()) <= NAME_BYTES_MAX:
            raise TidingsError(f"a durable subscription's name is 1 to {NAME_BYTES_MAX} bytes", "bad-start")
        number = self._names.get((owner, name))
        reg = None if number is None else self._regs.get(number)
        if reg is None:
            return None
        if (reg.pattern, reg.filter) != (pattern, filter_text):
            raise TidingsError(f"durable subscription {name!r} exists with pattern {reg.pattern!r} and filter "
                               f"{reg.filter!r}; end it (close with forget) to change them", "bad-start")
        if reg.key is not None:
            raise TidingsError(f"durable subscription {name!r} is in use by another connection", "bad-start")
        return reg

    def resume(self, number: int, tree: str, key: int) -> Registration | None:
        """The subscription registered as `number` resumed here on subend `key` (None: unknown
        here, or of another tree)."""
        reg = self._regs.get(number)
        if reg is None or reg.tree != tree:
            return None
        reg.key = key
        reg.away_us = 0
        self._changed()
        return reg

    def release(self, number: int, released: Checkpoint) -> None:
        """The application acknowledged everything through `released`."""
        reg = self._regs.get(number)
        if reg is not None:
            before = reg.released.to_wire()
            reg.released.release(released)
            if reg.released.to_wire() != before:
                self._changed()

    def left(self, number: int, key: int, wall_us: int) -> None:
        """Subend `key` of registration `number` is gone (its connection closed): the subscriber is away."""
        reg = self._regs.get(number)
        if reg is not None and reg.key == key:
            reg.key = None
            reg.away_us = wall_us
            self._changed()

    def drop(self, number: int) -> Registration | None:
        reg = self._regs.pop(number, None)
        if reg is not None:
            tree = self._by_tree[reg.tree]
            del tree[number]
            if not tree:
                del self._by_tree[reg.tree]
            if reg.name is not None:
                self._names.pop(reg.name, None)
            self._changed()
        return reg

    def expired(self, wall_us: int) -> list[Registration]:
        """Registrations whose subscriber has been away longer than the expiry: dropped."""
        for r in self._regs.values():
            if r.key is None and not r.away_us:  # restored from a save: away since the broker started
                r.away_us = wall_us
        old = [r.number for r in self._regs.values() if r.key is None and wall_us - r.away_us > self.expiry_us]
        dropped = [reg for reg in map(self.drop, old) if reg is not None]
        self.expired_total += len(dropped)
        return dropped

    def held(self, tree: str | None, pubend: str) -> int | None:
        """The smallest tick of `pubend` released by the registrations of `tree` (of every tree when
        None); None when there are none."""
        key = (tree, pubend)
        if key in self._held:
            return self._held[key]
        regs = self._regs.values() if tree is None else self._by_tree.get(tree, {}).values()
        value = min((r.released.position(pubend) for r in regs), default=None)
        if len(self._held) >= 4 * len(self._regs) + 64:
            self._held.clear()
        self._held[key] = value
        return value

    def trees(self) -> dict[str, int]:
        """Each tree with registrations, and how many."""
        return {tree: len(regs) for tree, regs in self._by_tree.items()}

    def _add(self, reg: Registration) -> None:
        self._regs[reg.number] = reg
        self._by_tree.setdefault(reg.tree, {})[reg.number] = reg
        if reg.name is not None:
            self._names[reg.name] = reg.number
        self._changed()

    def _changed(self) -> None:
        self._held.clear()
        self.dirty = True

    # ---- saving --------------------------------------------------------------------------------

    def take_save(self) -> bytes | None:
        """The state to save when it changed since the last save (then no longer dirty), else None."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.encode()

    def encode(self) -> bytes:
        regs = [[r.number, r.tree, r.released.to_wire(), r.away_us, *(list(r.name) if r.name else ["", ""]),
                 r.pattern, r.filter] for r in self._regs.values()]
        return msgpack.packb([FORMAT, self._next, regs, sorted(self.held_trees.items())])

    @classmethod
    def decode(cls, data: bytes, expiry_us: int, registrations_max: int) -> Registrations:
        """What `encode` saved; every registration comes back with its subscriber away (since the
        first `expired` call if it was connected when saved). StateError when it does not decode."""
        out = cls(expiry_us, registrations_max)
        try:
            version, next_number, regs, held = msgpack.unpackb(data)
            if version != FORMAT:
                raise StateError(f"durable state of format {version!r}, this broker reads {FORMAT}")
            for number, tree, released, away_us, owner, name, pattern, filter_text in regs:
                if type(number) is not int or type(tree) is not str or type(away_us) is not int \
                        or not all(type(v) is str for v in (owner, name, pattern, filter_text)):
                    raise ValueError("a registration is [number, tree, checkpoint, away, owner, name, pattern, filter]")
                out._add(Registration(number, tree, Checkpoint.from_wire(released), None, away_us,
                                      (owner, name) if name else None, pattern, filter_text))
            out.held_trees = {tree: tick for tree, tick in held if type(tree) is str and type(tick) is int}
            out._next = max([int(next_number), *(n + 1 for n in out._regs)])
        except (ValueError, TypeError, TokenError, msgpack.exceptions.ExtraData) as exc:
            raise StateError(f"the saved durable subscriptions do not decode: {exc}") from None
        out.dirty = False
        return out

    def status(self) -> dict[str, Any]:
        away = sum(1 for r in self._regs.values() if r.key is None)
        named = sorted((r for r in self._regs.values() if r.name is not None), key=lambda r: r.name or ("", ""))
        return {"durable_registrations": len(self._regs), "durable_away": away,
                "durable_expired": self.expired_total, "durable_moved": self.moved_total,
                "durable_named": [_named_status(r) for r in named[:NAMED_REPORTED_MAX]]}


def _named_status(reg: Registration) -> dict[str, Any]:
    """A named registration as `tidings durable list` shows it: who owns it, what it reads, whether
    a connection uses it (else since when it is away, wall-clock microseconds) and what it released."""
    assert reg.name is not None
    return {"owner": reg.name[0], "name": reg.name[1], "pattern": reg.pattern, "filter": reg.filter,
            "connected": reg.key is not None, "away_us": reg.away_us if reg.key is None else None,
            "released": reg.released.to_wire()}
