"""The PLDB tuple store (the PsEPR paper's §4.2) as a tidings service.

Theory of operation. Monitors publish a host's properties on `nodes/<host>/<metric>`, as event
attributes (`site`, and the measured value under its own name: `load`, `mem_free_mb`, ...). The
tuple store keeps, per host, the latest value of every property in SQLite. It answers query events
published on `pldb/query/<id>`, whose attribute `filter` is a tidings filter over a host's
properties (`site = "eu-west" and load > 3`), with one answer event on `pldb/answer/<id>`: the
matching hosts, or the reason the question was refused. It records the recommendations that
value-add services publish on `pldb/recommend/<site>` (§4.4).

Exactly once across its own restarts. Each of its three subscriptions (properties, queries,
recommendations) is durable, and its checkpoint token is written in the same SQLite transaction as
the rows its batch of events changed. A store killed at any point resumes from the tokens of its
last commit: the events of a batch it had not committed come again and are applied once. An answer
is published before the transaction that records its query commits, as an idempotent publish named
by the query (producer `pldb-tuple-store/<name>`, sequence from the query's pubend and tick): a
query answered before a crash is answered again under the same name and the broker logs it once.

The journal records every event applied, in order: (stream, pubend, tick, channel, arrival time).
It lets an audit check the store's input against what was published without trusting the brokers,
and gives the delivery latency. It is bounded by `journal_rows_max`; past it the store goes on
and marks the journal incomplete.

Bounds: `hosts_max` hosts (properties of further hosts are refused and counted), the broker's 64
attributes per event, `answer_hosts_max` hosts per answer (the answer says it was truncated),
BATCH_EVENTS_MAX events per transaction. Events released by a broker before the store read them
reach it as gap markers: never silent, they are counted per stream (`counter` table, `gaps_<stream>`).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from tidings.client.client import Client, Gap, Subscription
from tidings.core.errors import TidingsError
from tidings.core.event import Event
from tidings.core.filters import parse_filter

PROPERTIES = "nodes/+/+"
QUERIES = "pldb/query/+"
RECOMMENDATIONS = "pldb/recommend/+"
ANSWER_PREFIX = "pldb/answer/"
HOSTS_MAX = 100_000
ANSWER_HOSTS_MAX = 1_000
JOURNAL_ROWS_MAX = 2_000_000
BATCH_EVENTS_MAX = 2_048  # events applied per transaction


class Stream(StrEnum):
    """The store's three durable subscriptions, as named in its positions and journal."""

    PROPERTIES = "properties"
    QUERIES = "queries"
    RECOMMENDATIONS = "recommendations"


PATTERNS = {Stream.PROPERTIES: PROPERTIES, Stream.QUERIES: QUERIES, Stream.RECOMMENDATIONS: RECOMMENDATIONS}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS position (stream TEXT PRIMARY KEY, token TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS property (host TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL,
    pubend TEXT NOT NULL, tick INTEGER NOT NULL, PRIMARY KEY (host, name));
CREATE TABLE IF NOT EXISTS recommendation (pubend TEXT NOT NULL, tick INTEGER NOT NULL, site TEXT NOT NULL,
    payload TEXT NOT NULL, PRIMARY KEY (pubend, tick));
CREATE TABLE IF NOT EXISTS answered (pubend TEXT NOT NULL, tick INTEGER NOT NULL, query TEXT NOT NULL,
    hosts INTEGER NOT NULL, error TEXT, PRIMARY KEY (pubend, tick));
CREATE TABLE IF NOT EXISTS journal (n INTEGER PRIMARY KEY, stream TEXT NOT NULL, pubend TEXT NOT NULL,
    tick INTEGER NOT NULL, channel TEXT NOT NULL, received_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class Answer:
    """The answer to one query event: published on `channel` as an idempotent event `seq`."""

    channel: str
    payload: bytes
    attributes: dict[str, Any]
    seq: int
    query: Event
    hosts: int
    error: str | None


def query_seq(pubend: str, tick: int) -> int:
    """The producer sequence naming the answer to the query event (pubend, tick)."""
    return int.from_bytes(hashlib.blake2b(f"{pubend}/{tick}".encode(), digest_size=8).digest(), "big")


class TupleStore:
    """The SQLite side of the service: positions, properties, answers, recommendations, journal."""

    def __init__(self, path: Path, *, hosts_max: int = HOSTS_MAX, answer_hosts_max: int = ANSWER_HOSTS_MAX,
                 journal_rows_max: int = JOURNAL_ROWS_MAX) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL: a committed transaction survives kill -9
        self.db.executescript(_SCHEMA)
        self.hosts_max, self.answer_hosts_max, self.journal_rows_max = hosts_max, answer_hosts_max, journal_rows_max
        self._journal_rows = self._hosts = 0
        self._recount()

    def _recount(self) -> None:
        """The bounded counts, from the rows (after opening, and after a rolled-back batch)."""
        self._journal_rows = self.db.execute("SELECT count(*) FROM journal").fetchone()[0]
        self._hosts = self.db.execute("SELECT count(DISTINCT host) FROM property").fetchone()[0]

    def close(self) -> None:
        self.db.close()

    def token(self, stream: Stream) -> str | None:
        row = self.db.execute("SELECT token FROM position WHERE stream = ?", (stream.value,)).fetchone()
        return None if row is None else str(row[0])

    def host(self, host: str) -> dict[str, Any]:
        """A host's latest properties (and `host` itself)."""
        rows = self.db.execute("SELECT name, value FROM property WHERE host = ?", (host,)).fetchall()
        return {"host": host, **{name: json.loads(value) for name, value in rows}} if rows else {}

    def _hosts_properties(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every host's properties (and `host`), by host name, in one scan."""
        rows = self.db.execute("SELECT host, name, value FROM property ORDER BY host")
        for host, group in itertools.groupby(rows, key=lambda row: row[0]):
            yield host, {"host": host, **{name: json.loads(value) for _, name, value in group}}

    def counter(self, name: str) -> int:
        row = self.db.execute("SELECT value FROM counter WHERE name = ?", (name,)).fetchone()
        return 0 if row is None else int(row[0])

    def answer(self, query: Event) -> Answer:
        """The answer to a query event; a bad question gets an answer naming what is wrong."""
        qid = query.channel.rsplit("/", 1)[1]
        text = query.attributes.get("filter")
        hosts: list[str] = []
        error = None
        try:
            if not isinstance(text, str):
                raise TidingsError("a query needs a string attribute 'filter'")
            check = parse_filter(text)
            for host, props in self._hosts_properties():
                if check.matches(props):
                    hosts.append(host)
        except TidingsError as exc:
            error = str(exc)
        truncated = len(hosts) > self.answer_hosts_max
        body: dict[str, Any] = ({"query": qid, "error": error} if error is not None else
                                {"query": qid, "hosts": hosts[:self.answer_hosts_max], "count": len(hosts),
                                 "truncated": truncated})
        attrs: dict[str, Any] = {"query": qid, **({"error": error} if error else {"count": len(hosts)})}
        return Answer(ANSWER_PREFIX + qid, json.dumps(body).encode(), attrs, query_seq(query.pubend, query.tick),
                      query, len(hosts), error)

    def commit(self, stream: Stream, events: list[Event], token: str, answers: Sequence[Answer] = (),
               gaps: int = 0) -> None:
        """Apply a batch of one stream's events and store its token, in one transaction; `gaps`
        counts the gap markers of the batch (events released before the store read them)."""
        received_ns = time.time_ns()
        cur = self.db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            for ev in events:
                if stream is Stream.PROPERTIES:
                    self._property(cur, ev)
                elif stream is Stream.RECOMMENDATIONS:
                    cur.execute("INSERT OR REPLACE INTO recommendation VALUES (?, ?, ?, ?)",
                                (ev.pubend, ev.tick, ev.channel.rsplit("/", 1)[1], ev.payload.decode(errors="replace")))
                self._journal(cur, stream, ev, received_ns)
            for a in answers:
                cur.execute("INSERT OR REPLACE INTO answered VALUES (?, ?, ?, ?, ?)",
                            (a.query.pubend, a.query.tick, a.attributes["query"], a.hosts, a.error))
            for _ in range(gaps):
                self._count(cur, f"gaps_{stream.value}")
            cur.execute("INSERT OR REPLACE INTO position VALUES (?, ?)", (stream.value, token))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            self._recount()
            raise

    def _property(self, cur: sqlite3.Cursor, ev: Event) -> None:
        host = ev.channel.split("/")[1]
        if not cur.execute("SELECT 1 FROM property WHERE host = ? LIMIT 1", (host,)).fetchone():
            if self._hosts >= self.hosts_max:
                self._count(cur, "hosts_refused")
                return
            self._hosts += 1
        for name, value in ev.attributes.items():
            if name != "host":
                cur.execute("INSERT OR REPLACE INTO property VALUES (?, ?, ?, ?, ?)",
                            (host, name, json.dumps(value), ev.pubend, ev.tick))

    def _journal(self, cur: sqlite3.Cursor, stream: Stream, ev: Event, received_ns: int) -> None:
        if self._journal_rows >= self.journal_rows_max:
            self._count(cur, "journal_dropped")
            return
        self._journal_rows += 1
        cur.execute("INSERT INTO journal (stream, pubend, tick, channel, received_ns) VALUES (?, ?, ?, ?, ?)",
                    (stream.value, ev.pubend, ev.tick, ev.channel, received_ns))

    def _count(self, cur: sqlite3.Cursor, name: str) -> None:
        cur.execute("INSERT INTO counter VALUES (?, 1) ON CONFLICT(name) DO UPDATE SET value = value + 1", (name,))


def journal(path: Path, stream: Stream) -> list[tuple[str, int, str, int]]:
    """(pubend, tick, channel, received_ns) of every event the store at `path` applied from
    `stream`, in the order it applied them (read-only; the store may be running)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT pubend, tick, channel, received_ns FROM journal WHERE stream = ? ORDER BY n",
                          (stream.value,)).fetchall()
    finally:
        db.close()


class TupleStoreService:
    """The store as a tidings client: three durable subscriptions on one connection."""

    def __init__(self, store: TupleStore, client: Client, name: str) -> None:
        self.store, self.client, self.name = store, client, name
        self.producer = f"pldb-tuple-store/{name}"

    async def subscribe(self) -> dict[Stream, Subscription]:
        subs = {}
        for stream, pattern in PATTERNS.items():
            token = self.store.token(stream)
            sub = await self.client.subscribe(pattern, durable=True, token=token)
            sub.auto_ack = False  # acknowledged once committed, below
            subs[stream] = sub
        return subs

    async def run(self, stream: Stream, sub: Subscription) -> None:
        while True:
            batch = await sub.next_batch(BATCH_EVENTS_MAX)
            if not batch:
                return
            events = [ev for ev in batch if not isinstance(ev, Gap)]  # a gap: the token moved past it
            answers = [self.store.answer(ev) for ev in events] if stream is Stream.QUERIES else []
            if answers:
                await self.client.publish_many([(a.channel, a.payload, a.attributes, a.seq) for a in answers],
                                               producer=self.producer)
            token = sub.token
            self.store.commit(stream, events, token, answers, gaps=len(batch) - len(events))
            sub.ack(token)


async def serve(broker: str, db: Path, *, name: str = "tuple-store",
                ready: Callable[[], None] | None = None) -> None:
    """Run the tuple store against `broker` with its state in `db` until cancelled."""
    store = TupleStore(db)
    try:
        client = await Client.connect(broker, service="pldb-tuple-store", instance=name)
        try:
            service = TupleStoreService(store, client, name)
            subs = await service.subscribe()
            if ready is not None:
                ready()
            await asyncio.gather(*(service.run(stream, sub) for stream, sub in subs.items()))
        finally:
            await client.close()
    finally:
        store.close()
