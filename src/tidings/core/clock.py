"""The broker's wall clock as its machines read it.

A runtime's input may carry the wall clock (`Received`, `TimerFired`: `wall_us`, microseconds since
the epoch); the machines that stamp or age things by it (the reliability node's merge points,
release and epochs, the pubend directory's versions) read the latest one from a `WallClock` they
share with the cluster member (core/broker/cluster.py), which the broker sets on each such input:
one attribute written per input, no call through the machines.
"""

from __future__ import annotations


class WallClock:
    """The wall clock at the latest input that had one (µs since the epoch; 0: none yet)."""

    __slots__ = ("us",)

    def __init__(self, us: int = 0) -> None:
        self.us = us
