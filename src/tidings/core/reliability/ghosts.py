"""Children that left a stream a moment ago, still holding its release and delivered points.

A child that leaves a stream (its broker failed, a partition, a repair under way) holds the release
point and the delivered point it last acknowledged (release.py) for `release_hold_ns` longer: the
pubend must not release, early or not, what the brokers below still need while they repair. The
same child coming back (a restarted broker) replaces its ghost, since a new consumer holds 0 until
it acks. Ghosts hold only these two: the ack itself, which drives caches and retransmission,
follows the consumers there are. Plain data with no effects, owned by its `Istream`.
"""

from __future__ import annotations


class Ghosts:
    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: list[tuple[str | int, int, int, int]] = []  # (child, delivered, released, until_ns)

    def left(self, key: str | int, delivered: int, released: int, until_ns: int) -> None:
        self._held.append((key, delivered, released, until_ns))

    def back(self, key: str | int) -> None:
        """`key` is a consumer again: its ghost goes."""
        if self._held:
            self._held = [g for g in self._held if g[0] != key]

    def hold(self, now: int, released: int, delivered: int) -> tuple[int, int]:
        """(released, delivered) held down by the ghosts still within their time at `now`."""
        if self._held:
            self._held = [g for g in self._held if g[3] > now]
        for _, ghost_delivered, ghost_released, _ in self._held:
            delivered = min(delivered, ghost_delivered)
            released = min(released, ghost_released, ghost_delivered)
        return released, delivered


__all__ = ["Ghosts"]
