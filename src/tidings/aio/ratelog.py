"""Log lines rate-limited per key: at most one a second per remote address, say, however fast a
misconfigured or hostile peer retries, with the number held back told in the next line.

The keys kept are bounded (`keys_max`): when the table is full, keys quiet for longer than the
interval are forgotten, and if none is, a new key shares one budget with every other such key
(OVERFLOW), so a flood from many addresses logs at most `keys_max + 1` lines per interval."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

KEYS_MAX = 1024
OVERFLOW = "(other keys)"  # the budget new keys share while the table is full of recent ones


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 1.0, keys_max: int = KEYS_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._clock = clock
        self.interval_s = interval_s
        self.keys_max = keys_max
        self._keys: dict[str, tuple[float, int]] = {}  # key -> (when last logged, lines held back since)

    @property
    def keys(self) -> list[str]:
        """The keys remembered now, oldest first (at most keys_max, and one shared by the rest)."""
        return list(self._keys)

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log `msg % args` unless a line for `key` was logged within the interval (then count it);
        True when logged."""
        now = self._clock()
        if key not in self._keys and len(self._keys) >= self.keys_max:
            self._forget(now)
            if len(self._keys) >= self.keys_max:
                key = OVERFLOW
        last = self._keys.get(key)
        if last is not None and now - last[0] < self.interval_s:
            self._keys[key] = (last[0], last[1] + 1)
            return False
        held = 0 if last is None else last[1]
        self._keys[key] = (now, 0)
        if held:
            self._log.log(level, msg + " (and %d more like it since the last such line, held back)", *args, held)
        else:
            self._log.log(level, msg, *args)
        return True

    def _forget(self, now: float) -> None:
        for k in [k for k, (when, _) in self._keys.items() if now - when >= self.interval_s]:
            del self._keys[k]
