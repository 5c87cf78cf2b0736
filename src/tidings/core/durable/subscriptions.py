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

The machine owns no connection, tree or stream: each call returns an `Outcome` the broker carries
out (effects for the runtime, trees whose away member is gone, old homes to tell).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tidings.core import errors
from tidings.core.durable.checkpoint import Checkpoint, Home
from tidings.core.durable.registrations import Registration, Registrations
from tidings.core.effects import Effect, SaveDurable
from tidings.core.errors import TidingsError
from tidings.core.subscription.subend import Subend
from tidings.core.wire import messages


@dataclass(slots=True)
class Outcome:
    effects: list[Effect] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # trees that lost an away member (a registration)
    moved: list[Home] = field(default_factory=list)  # old homes that must forget a registration
    added: list[Registration] = field(default_factory=list)  # new registrations (recorded in the PFS)
    dropped: list[Registration] = field(default_factory=list)  # registrations that ended
    resumed: Registration | None = None  # the registration a subscription resumed (its catchup may use the PFS)


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

    def begin(self, s: Subend, checkpoint: Checkpoint, tree: str, name: tuple[str, str] | None,
              me: str | None) -> Outcome:
        """Durable subscription `s` of `tree` starts at `checkpoint` (named `name`); the checkpoint
        returned to the client then names its home here. TidingsError past the registrations limit."""
        s.durable = True
        s.silenced = dict(checkpoint.positions)
        out = Outcome()
        if me is None:
            return out  # not in an overlay (a measurement setup): nothing to hold release for
        home = checkpoint.home
        regs = self.registrations
        reg = None
        if home is not None and home.pubend == self.pubend_id:
            away = regs.get(home.registration)
            reg = regs.resume(home.registration, tree, s.key)
            if reg is not None:
                out.resumed = reg
                regs.release(reg.number, checkpoint)
                if away is not None and away.key is None:
                    out.gone.append(tree)  # the subend counts for the tree again
        if reg is None:
            reg = regs.register(tree, checkpoint, s.key, name, s.pattern, "" if s.filter is None else s.filter.text)
            out.added.append(reg)
            out.effects.append(SaveDurable(regs.take_save() or regs.encode(), before_replies=True))
            if home is not None and home.pubend != self.pubend_id:
                out.moved.append(home)
        s.registration = reg.number
        checkpoint.home = Home(me, self.pubend_id, reg.number)
        return out

    def end(self, s: Subend, ended: bool, wall_us: int, subends: Mapping[int, Subend]) -> tuple[bool, Outcome]:
        """Subscription `s` leaves: ended for good (`ended`), or its connection went. Returns
        whether its registration now holds its place in the tree (its subscriber is away)."""
        reg = None if s.registration is None else self.registrations.get(s.registration)
        mine = reg is not None and reg.key == s.key  # (not resumed on another connection since)
        if reg is None or not mine:
            return False, Outcome()
        if not ended:
            self.registrations.left(reg.number, s.key, wall_us)
            return True, Outcome()
        return False, self.forget(reg.number, subends)

    def forget(self, number: int, subends: Mapping[int, Subend]) -> Outcome:
        """Registration `number` ends; while its subscriber was away it held a place in its tree."""
        reg = self.registrations.drop(number)
        out = Outcome()
        if reg is None:
            return out
        out.dropped.append(reg)
        if reg.key is None:
            out.gone.append(reg.tree)
        else:
            s = subends.get(reg.key)
            if s is not None:
                s.registration = None  # resumed elsewhere while still connected here: served, not held
        return out

    def release(self, s: Subend | None, sub: int, checkpoint: list[object]) -> None:
        """RELEASE: the application consumed everything through `checkpoint` (sub.ack); a
        TidingsError for the client when `sub` is no durable subscription or `checkpoint` no token."""
        if s is None or not s.durable:
            raise TidingsError(f"no durable subscription {sub}", errors.UNKNOWN_SUBSCRIPTION)
        released = Checkpoint.from_wire(checkpoint)
        if s.registration is not None:
            self.registrations.release(s.registration, released)

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

    def silence(self, durable: list[Subend], synced: int,
                remote: Callable[[Subend], dict[str, int]]) -> list[Effect]:
        """Every durable subscription's checkpoint moves up to what has been delivered to it or did
        not match: its own pubend's log position (the durable tail `synced` for a live one) and
        each other pubend's delivered-through tick (`remote`)."""
        out: list[Effect] = []
        for s in durable:
            positions = {self.pubend_id: max(s.position, synced) if s.live else s.position}
            positions.update(remote(s))
            out += s.silence(positions)
        return out
