"""Token buckets: rates with a burst, in integer arithmetic on the runtime's `now` (nanoseconds).

A bucket of `rate_per_s` holds at most `rate_per_s * burst_s` tokens and gains `rate_per_s` per
second. Levels are kept in token-nanoseconds (tokens x 1e9), so refilling is exact and two runs
with the same inputs decide alike. PsEPR §6.2 names the missing flow control: a flooder meets its
own bucket and nobody else's.
"""

from __future__ import annotations

from tidings.core.units import SECOND_NS


class TokenBucket:
    __slots__ = ("_capacity", "_level", "_rate", "_updated")

    def __init__(self, rate_per_s: int, burst_s: int, now: int) -> None:
        assert rate_per_s > 0 and burst_s > 0
        self._rate = rate_per_s
        self._capacity = rate_per_s * burst_s * SECOND_NS
        self._level = self._capacity
        self._updated = now

    def _refill(self, now: int) -> None:
        if now > self._updated:
            self._level = min(self._capacity, self._level + (now - self._updated) * self._rate)
            self._updated = now

    def available(self, now: int) -> int:
        """Whole tokens that could be taken at `now`."""
        self._refill(now)
        return self._level // SECOND_NS

    def wait_ns(self, now: int, amount: int) -> int:
        """How long until `amount` tokens (at most a full bucket) are there."""
        self._refill(now)
        missing = min(amount * SECOND_NS, self._capacity) - self._level
        return max(0, -(-missing // self._rate))

    def take(self, now: int, amount: int) -> bool:
        """Take `amount` tokens if the bucket holds them; False (and nothing taken) otherwise."""
        self._refill(now)
        cost = amount * SECOND_NS
        if cost > self._level:
            return False
        self._level -= cost
        return True
