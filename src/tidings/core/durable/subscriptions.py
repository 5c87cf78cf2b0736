"""Durable subscriptions at the broker that hosts them: where each starts, which registration holds
it, what its client acknowledged, its SILENCE, and the saved state (Gryphon durable §2-§4;
docs/durable.md).

Theory of operation. A SUBSCRIBE that carries positions is durable. `checkpoint` gives its start:
the token's positions, this broker's own pubend at the subscription's own start unless the token
names it; for a named (broker-held) one, the positions it last acknowledged here, or now when the
name is new. `begin` binds the subscription to a registration (core/durable/registrations.py): the one the
token names when it is this broker's (resumed: its away place in the tree ends), else a new one,
saved before SUBSCRIBED names it (a crash right after must not forget what it holds); a token of
another broker makes that broker its old home, to be told (MOVED) to forget it. RELEASE (sub.ack)
moves the registration's released checkpoint; SILENCE moves the client's checkpoint past what was
delivered to it or did not match. `end` says whether a subscription that leaves is away (its
registration holds its place) or ended; `save`, every `durable_save_interval_ns`, ends the
registrations away longer than `durable_expiry_ns` and saves the state when it changed.

The machine owns no connection, tree, stream or subscription: each call returns an `Outcome` the
broker carries out (effects for the runtime, trees whose away member is gone, old homes to tell, the
registration a subscription is bound to or no longer held by: `Subscription.bind` / `unbind`,
core/subscription/subscription.py). SILENCE is the subscription's own (`Subscription.silence`).

The subscriber's side (core/subscription/subscribers.py) carries each outcome out as typed effects,
in order: the runtime's (SaveDurable), `Registered` for the constream (the PFS records the added
registrations and no longer the dropped ones), `Resume` for a resumed subscription's catchup from
the PFS, `TellHome` for an old home that must forget a registration (MOVED, through the reliability
node). Two timers pace the machine (`DURABLE_SILENCE`, `DURABLE_SAVE`): each durable
subscription's SILENCE every `durable_silence_interval_ns` while there is one, and `save` every
`durable_save_interval_ns` once the broker is in an overlay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tidings.core import errors
from tidings.core.durable.checkpoint import Checkpoint, Home
from tidings.core.durable.registrations import Registration, Registrations
from tidings.core.effects import Effect, SaveDurable
from tidings.core.errors import TidingsError
from tidings.core.filters import Filter
from tidings.core.wire import messages


class DurableSilenceTimer(NamedTuple):
    """Durable subscriptions are due a SILENCE (core/durable/checkpoint.py)."""


class DurableSaveTimer(NamedTuple):
    """The durable state may be due saving, and registrations expiring (core/durable/registrations.py)."""


DURABLE_SILENCE = DurableSilenceTimer()
DURABLE_SAVE = DurableSaveTimer()
DurableTimer = DurableSilenceTimer | DurableSaveTimer


class Registered(NamedTuple):
    """For the constream (core/durable/constream.py): registrations `added` are recorded from
    now on, `dropped` no longer are."""

    added: list[Registration]
    dropped: list[Registration]


class Resume(NamedTuple):
    """For the constream: local subscription `key` (`pattern`, `filter`) resumed `registration`
    (None: it has a new one) from `checkpoint`; its catchup asks the PFS what matched it while away."""

    key: int
    registration: Registration | None
    checkpoint: Checkpoint
    pattern: str
    filter: Filter | None


class TellHome(NamedTuple):
    """Old home `home` must forget the registration it held (MOVED, through the reliability node)."""

    home: Home


@dataclass(slots=True)
class Outcome:
    effects: list[Effect] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # trees that lost an away member (a registration)
    moved: list[Home] = field(default_factory=list)  # old homes that must forget a registration
    added: list[Registration] = field(default_factory=list)  # new registrations (recorded in the PFS)
    dropped: list[Registration] = field(default_factory=list)  # registrations that ended
    resumed: Registration | None = None  # the registration a subscription resumed (its catchup may use the PFS)
    registration: int | None = None  # the registration `begin` bound the subscription to
    unbound: list[int] = field(default_factory=list)  # subscriptions (keys) no longer held by a registration


class DurableSubscriptions:
    def __init__(self, pubend_id: str, registrations: Registrations) -> None:
        self.pubend_id = pubend_id
        self.registrations = registrations

    def checkpoint(self, service: str, msg: messages.Subscribe, position: int, remote_start: int,
                   me: str | None) -> Checkpoint | None:
        """The start of subscription `msg` of a client of `service` (None when not durable), its
        own pubend's events from `position` and other pubends' after `remote_start`; `me` is this
        broker's address in the overlay (None outside one). TidingsError when it cannot start."""
        if msg.positions is None:
            return None
        if msg.end is not None or msg.order == messages.ORDER_TOTAL or msg.start == messages.START_OLDEST:
            raise TidingsError("a durable subscription starts now or at a token, in publisher order, "
                               "without an end", errors.BAD_START)
        if type(msg.home) is str:  # broker-held (named): resume where it acknowledged, or start now
            if me is None:
                raise TidingsError("a named durable subscription needs the broker in an overlay", errors.BAD_START)
            reg = self.registrations.named(service, msg.home, msg.pattern, msg.filter or "")
            if reg is None:
                return Checkpoint(remote_start, {self.pubend_id: position})
            return Checkpoint(reg.released.default, dict(reg.released.positions), Home(me, self.pubend_id, reg.number))
        checkpoint = Checkpoint.from_wire([remote_start, msg.positions] if msg.home is None
                                          else [remote_start, msg.positions, msg.home])
        checkpoint.positions.setdefault(self.pubend_id, position)
        return checkpoint

    def begin(self, key: int, pattern: str, filter_text: str, checkpoint: Checkpoint, tree: str,
              name: tuple[str, str] | None, me: str | None) -> Outcome:
        """Durable subscription `key` of `tree` (`pattern`, `filter_text`) starts at `checkpoint`
        (named `name`); the checkpoint returned to the client then names its home here, and the
        outcome the registration it is bound to. TidingsError past the registrations limit."""
        out = Outcome()
        if me is None:
            return out  # not in an overlay (a measurement setup): nothing to hold release for
        home = checkpoint.home
        regs = self.registrations
        reg = None
        if home is not None and home.pubend == self.pubend_id:
            away = regs.get(home.registration)
            reg = regs.resume(home.registration, tree, key)
            if reg is not None:
                out.resumed = reg
                regs.release(reg.number, checkpoint)
                if away is not None and away.key is None:
                    out.gone.append(tree)  # the subscription counts for the tree again
        if reg is None:
            reg = regs.register(tree, checkpoint, key, name, pattern, filter_text)
            out.added.append(reg)
            out.effects.append(SaveDurable(regs.take_save() or regs.encode(), before_replies=True))
            if home is not None and home.pubend != self.pubend_id:
                out.moved.append(home)
        out.registration = reg.number
        checkpoint.home = Home(me, self.pubend_id, reg.number)
        return out

    def end(self, key: int, registration: int | None, ended: bool, wall_us: int) -> tuple[bool, Outcome]:
        """Subscription `key` (bound to `registration`) leaves: ended for good (`ended`), or its
        connection went. Returns whether its registration now holds its place in the tree (its
        subscriber is away)."""
        reg = None if registration is None else self.registrations.get(registration)
        if reg is None or reg.key != key:  # (resumed on another connection since)
            return False, Outcome()
        if not ended:
            self.registrations.left(reg.number, key, wall_us)
            return True, Outcome()
        return False, self.forget(reg.number)

    def forget(self, number: int) -> Outcome:
        """Registration `number` ends; while its subscriber was away it held a place in its tree."""
        reg = self.registrations.drop(number)
        out = Outcome()
        if reg is None:
            return out
        out.dropped.append(reg)
        if reg.key is None:
            out.gone.append(reg.tree)
        else:
            out.unbound.append(reg.key)  # resumed elsewhere while still connected here: served, not held
        return out

    def release(self, durable: bool, registration: int | None, sub: int, checkpoint: list[object]) -> None:
        """RELEASE: the application consumed everything through `checkpoint` (sub.ack) of
        subscription `sub` (`durable`, bound to `registration`); a TidingsError for the client
        when `sub` is no durable subscription or `checkpoint` no token."""
        if not durable:
            raise TidingsError(f"no durable subscription {sub}", errors.UNKNOWN_SUBSCRIPTION)
        released = Checkpoint.from_wire(checkpoint)
        if registration is not None:
            self.registrations.release(registration, released)

    def save(self, wall_us: int, held_trees: dict[str, int]) -> Outcome:
        """Expire registrations away too long; save the durable state (with the pubend's
        `held_trees`) when it changed."""
        regs = self.registrations
        expired = regs.expired(wall_us)
        out = Outcome(gone=[reg.tree for reg in expired], dropped=expired)
        if held_trees != regs.held_trees:
            regs.held_trees = held_trees
            regs.dirty = True
        data = regs.take_save()
        if data is not None:
            out.effects.append(SaveDurable(data))
        return out
