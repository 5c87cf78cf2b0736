"""The scrypt derivations MQTT passwords cost the broker: off the event loop, bounded, and cached.

Theory of operation. A native client derives its identity's salted key itself (core/auth/credentials.py:
a flood of native handshakes costs the broker HMACs). An MQTT client sends its password instead, so
the broker derives the key on the client's behalf: scrypt, about 80 ms and 16 MiB at the default
cost. Run on the event loop, a flood of CONNECTs with wrong passwords would stop the broker serving
everyone. So an MQTT session never runs scrypt itself:

- it asks for the derivation with an effect, `DeriveKey` (the gateway's outbox, `take`), which the
  runtime carries out on a small pool of worker threads (aio/mqtt.py; hashlib.scrypt releases the
  GIL), and takes the result back as an input, `KeyDerived`, as the storage worker's reads come back;
- at most `in_flight_max` derivations are asked for and not yet answered per broker, and at most
  `per_source_max` per source address: a CONNECT past either bound is refused at once (CONNACK 0x9F
  Connection rate exceeded in 5.0, 0x03 Server unavailable in 3.1.1), so neither the queue of work
  nor the memory it takes grows with a flood;
- a derivation whose password the broker then accepted (WELCOME) is remembered, keyed by the identity,
  the challenge's salt and cost and an HMAC of the password under a key drawn at start (so the cache
  holds no password), at most `cache_entries_max`, least recently used first out: a reconnecting
  client does not pay scrypt again. A wrong password is never cached, so it costs a derivation each
  time, within the bounds above.

No state machine here: `Derivations` is a ledger of slots (conn -> source) and an LRU map.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from dataclasses import dataclass

from tidings.core.auth.credentials import KdfParams

IN_FLIGHT_MAX = 8  # derivations asked for and not yet answered, per broker
PER_SOURCE_MAX = 2  # the same, per source address
CACHE_ENTRIES_MAX = 1024  # successful derivations remembered (32-byte keys)


@dataclass(frozen=True, slots=True)
class DeriveKey:
    """Effect: derive the salted key of `secret` (scrypt with `salt` and `kdf`) off the event loop,
    then hand the gateway `KeyDerived(conn, ticket, ...)`."""

    conn: int
    ticket: int
    secret: bytes
    salt: bytes
    kdf: KdfParams

    def __repr__(self) -> str:  # never print the secret by accident
        return f"DeriveKey(conn={self.conn}, ticket={self.ticket})"


@dataclass(frozen=True, slots=True)
class KeyDerived:
    """Input: the derivation `ticket` asked for is done (`salted`: None when it failed)."""

    now: int
    conn: int
    ticket: int
    salted: bytes | None


class Derivations:
    def __init__(self, key: bytes, in_flight_max: int = IN_FLIGHT_MAX, per_source_max: int = PER_SOURCE_MAX,
                 cache_entries_max: int = CACHE_ENTRIES_MAX) -> None:
        """`key`: random bytes drawn at start, under which passwords are hashed for the cache."""
        self.key = key
        self.in_flight_max = in_flight_max
        self.per_source_max = per_source_max
        self.cache_entries_max = cache_entries_max
        self.in_flight: dict[int, str] = {}  # conn -> its source address
        self.per_source: dict[str, int] = {}
        self.cache: OrderedDict[bytes, bytes] = OrderedDict()
        self.outbox: list[DeriveKey] = []
        self.next_ticket = 0
        # figures
        self.asked = self.refused = self.hits = 0

    def cache_key(self, identity: str, secret: bytes, salt: bytes, kdf: KdfParams) -> bytes:
        head = f"{identity}\0{kdf.n}\0{kdf.r}\0{kdf.p}\0".encode() + len(salt).to_bytes(2, "big") + salt
        return hmac.new(self.key, head + secret, hashlib.sha256).digest()

    def cached(self, key: bytes) -> bytes | None:
        salted = self.cache.get(key)
        if salted is not None:
            self.cache.move_to_end(key)
            self.hits += 1
        return salted

    def remember(self, key: bytes, salted: bytes) -> None:
        self.cache[key] = salted
        self.cache.move_to_end(key)
        while len(self.cache) > self.cache_entries_max:
            self.cache.popitem(last=False)

    def ask(self, conn: int, source: str, secret: bytes, salt: bytes, kdf: KdfParams) -> int | None:
        """A derivation for `conn`: its ticket, or None past a bound (the CONNECT is refused)."""
        if conn in self.in_flight or len(self.in_flight) >= self.in_flight_max \
                or self.per_source.get(source, 0) >= self.per_source_max:
            self.refused += 1
            return None
        self.in_flight[conn] = source
        self.per_source[source] = self.per_source.get(source, 0) + 1
        self.next_ticket += 1
        self.asked += 1
        self.outbox.append(DeriveKey(conn, self.next_ticket, secret, salt, kdf))
        return self.next_ticket

    def done(self, conn: int) -> None:
        """`conn`'s derivation is answered, or its connection is gone: its slot is free (once the
        worker is done: a derivation still running for a closed connection keeps its slot)."""
        source = self.in_flight.pop(conn, None)
        if source is None:
            return
        left = self.per_source[source] - 1
        if left:
            self.per_source[source] = left
        else:
            del self.per_source[source]

    def take(self) -> list[DeriveKey]:
        """The derivations asked for since the last call, for the runtime's workers."""
        out, self.outbox = self.outbox, []
        return out

    def status(self) -> dict[str, int]:
        return {"derivations_in_flight": len(self.in_flight), "derivations_asked": self.asked,
                "derivations_refused": self.refused, "derivations_cached": len(self.cache),
                "derivation_cache_hits": self.hits}
