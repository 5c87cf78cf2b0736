"""Explicit states: an Enum per machine and a table of the moves it allows.

Theory of operation. A machine whose life has phases (a peer link, a client connection) names them
with a `StrEnum`, so they read as text in status output, and lists, in a `Transitions` table, the
states each may move to. Every change of state goes through `Transitions.move`, which raises
`ForbiddenTransition` on a move the table does not list. That is our own invariant, not a peer's
error: what a peer sends decides which allowed move a machine makes, never whether a forbidden one
happens, so in simulation a forbidden move fails the seed (as h11's state machine does).

A machine whose moves follow from what happens to it (not only from where it is) lists them as
`Moves`: (state, event) -> state, h11's EVENT_TRIGGERED_TRANSITIONS. The table then drives the
machine: it says the next state, rather than checking one the code chose.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Generic, TypeVar

S = TypeVar("S", bound=StrEnum)
E = TypeVar("E", bound=StrEnum)


class ForbiddenTransition(AssertionError):
    """A machine tried a move its transition table does not allow: a bug, never bad input."""


class Transitions(Generic[S]):
    __slots__ = ("_allowed", "_name")

    def __init__(self, name: str, allowed: Mapping[S, frozenset[S]]) -> None:
        self._name = name
        self._allowed = dict(allowed)

    def move(self, current: S, new: S) -> S:
        """`new`, when the table allows `current` -> `new`; else ForbiddenTransition."""
        if new not in self._allowed.get(current, frozenset()):
            raise ForbiddenTransition(f"{self._name}: {current} -> {new} is not an allowed transition")
        return new


class Moves(Generic[S, E]):
    """The table that drives a machine: in `state`, `event` leads to `next(state, event)`."""

    __slots__ = ("_name", "_table")

    def __init__(self, name: str, table: Mapping[tuple[S, E], S]) -> None:
        self._name = name
        self._table = dict(table)

    def next(self, state: S, event: E) -> S:
        """The state `event` leads to from `state`; ForbiddenTransition when the table lists none."""
        new = self._table.get((state, event))
        if new is None:
            raise ForbiddenTransition(f"{self._name}: {event} in {state} is not an allowed transition")
        return new

    def allows(self, state: S, event: E) -> bool:
        return (state, event) in self._table

    def table(self) -> dict[tuple[S, E], S]:
        """Every move, for tests and documentation."""
        return dict(self._table)
