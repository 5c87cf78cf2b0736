"""The publish intake of one broker: a PUBLISH checked event by event, its good events given
consecutive ticks of this broker's pubend, encoded once and logged as one batch.

Theory of operation (Gryphon: only the publisher's broker logs, DESIGN §2). A published event is
good when it is `[channel, attributes, payload]` with a valid channel, valid attributes and a
payload of at most `event_bytes_max` bytes, and the guard (core/auth/) lets its publisher publish
it (access rules, rates). A PUBLISH its identity's rates cannot take yet is not checked at all:
`publish` says how long it must wait, and the broker keeps it unread at the head of its connection
meanwhile (core/broker/connection.py Hold.RATE). Every bad or refused event is named in an ERROR,
one per reason and PUBLISH, numbered `seq + i` for the PUBLISH's `seq` and the event's index `i`
(core/broker/refusals.py: the first such number, their count and their ranges); the good ones are
given consecutive ticks
(`Pubend.reserve`), encoded once into the record the log keeps and every stream carries
(`[pubend, tick, channel, attributes, service, instance, payload]`, then `true` when the publisher
authenticated: core/event.py), and appended as one batch
(`Append`, then `Sync`). The ACK, one tick per event (None where refused), waits in the `Pubend`
until that batch is durable (group commit). An event on a channel seen before, without
attributes, is checked on a fast path: a channel once validated stays valid, and its trees are
cached beside it (`trees_of`, also the reliability node's).

A PUBLISH with a producer id is idempotent: the dedup window (core/publish/dedup.py) sorts its events into
new, duplicate (logged before: answered with that tick, once durable) and repeated within the
PUBLISH; only the new ones are checked and logged, with their (producer, pseq) key in the record.

Memory stays bounded while the disk is slow: a publisher whose PUBLISH leaves more than
`pending_sync_bytes_max` bytes waiting for a sync is not read (Hold.DISK) until half of them
are durable (`synced`), and then every paused publisher is released again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.broker.connection import ClientConnection, Hold
from tidings.core.channels import validate_channel
from tidings.core.clock import WallClock
from tidings.core.config import BrokerConfig
from tidings.core.effects import Append, Effect, Sync
from tidings.core.errors import ProtocolError, TidingsError
from tidings.core.event import OneAttribute, encode_records, one_attribute, validate_attributes
from tidings.core.multicast.trees import publish_trees
from tidings.core.publish import batch
from tidings.core.publish.dedup import DedupWindow, Verdict
from tidings.core.publish.pubend import Pubend
from tidings.core.publish.traffic import ChannelTraffic
from tidings.core.wire import messages

CHANNEL_CACHE_MAX = 65_536  # channels whose trees are kept; the cache is emptied when full
ATTRIBUTES_KNOWN_MAX = 1_024  # single attributes (name, value, type) seen valid; emptied when full

Good = tuple[str, dict[str, Any], bytes]  # a checked event: channel, attributes, payload


class ChannelTrees(dict[str, list[str]]):
    """The trees of each valid channel seen (multicast/trees.py `publish_trees`), at most
    CHANNEL_CACHE_MAX of them (emptied when full). `trees[channel]` of a channel seen before is a
    plain lookup, no call: the intake's check of every event and the pubend's sort of each sync's
    events onto trees (reliability/source_knowledge.py) both read it."""

    def __missing__(self, channel: str) -> list[str]:
        if len(self) >= CHANNEL_CACHE_MAX:
            self.clear()
        trees = self[channel] = publish_trees(channel)
        return trees


class Intake:
    __slots__ = ("_attributes_ok", "_packer", "_trees", "clock", "config", "dedup", "events_published",
                 "events_rejected", "guard", "paused", "pubend", "traffic", "trees_of")

    def __init__(self, config: BrokerConfig, guard: Guard, pubend: Pubend, dedup: DedupWindow,
                 clock: WallClock) -> None:
        """`clock`: the broker's wall clock, from which the pubend's ticks are drawn."""
        self.config = config
        self.clock = clock
        self.guard = guard
        self.pubend = pubend
        self.dedup = dedup
        self._trees = ChannelTrees()  # channels seen valid, each with its trees
        # the trees of a valid channel, from the cache (which a publish filled unless it was cleared since)
        self.trees_of: Callable[[str], list[str]] = self._trees.__getitem__
        # (name, value, type of value) of one-attribute maps seen valid (an MQTT QoS 0 event's `mqtt.qos`)
        self._attributes_ok: dict[OneAttribute | None, None] = {}  # (None never in it)
        self._packer = msgpack.Packer()  # reused: packb would build a Packer per event
        self.paused: dict[int, None] = {}  # connections not read until the pending bytes drain
        self.events_published = 0
        self.events_rejected = 0
        self.traffic = ChannelTraffic()  # events published per channel (core/publish/traffic.py)

    def publish(self, now: int, c: ClientConnection, msg: messages.Publish, out: list[Effect]) -> int:
        """Check each event of `msg`, give the good ones consecutive ticks, log them as one batch;
        or, when its identity's rates cannot take it yet, do nothing and say how long it must wait
        (the reading machine, which hands each PUBLISH over as it is read, then holds it: Hold.RATE)."""
        wall_us = self.clock.us
        if msg.producer is not None:  # the rates first; the rules once the dedup window sorted its events out
            wait_ns = self.guard.publish_wait_ns(c.identity, msg.events, now)
            if not wait_ns:
                self._publish_idempotent(now, c, msg, wall_us, out)
            return wait_ns
        refused: dict[int, TidingsError] = {}
        if msg.frame is None or not self.guard.publish_unchecked:  # (a frame's events are not decoded for it)
            wait_ns, refused = self.guard.admit_publish(c.identity, msg.events, now)  # the rates, then the rules
            if wait_ns:
                return wait_ns
        if not refused and self._one_pass(c, msg, wall_us, out):
            return 0
        valid, bad = self._check(now, c, msg.events, None, None, refused)
        if bad:
            c.refuse_events(now, msg.seq, bad, out)
        self.events_rejected += len(bad)
        if not valid:
            c.reply(messages.ack(msg.seq, self.pubend.pubend_id, [None] * len(msg.events)), out)
            return 0
        first = self.pubend.reserve(len(valid), wall_us)
        if bad:
            it = iter(range(first, first + len(valid)))
            ticks: list[int | None] = [None if i in bad else next(it) for i in range(len(msg.events))]
        else:
            ticks = list(range(first, first + len(valid)))
        self._log(c, msg.seq, valid, first, ticks, out)
        return 0

    def _one_pass(self, c: ClientConnection, msg: messages.Publish, wall_us: int, out: list[Effect]) -> bool:
        """Whether every event of `msg` is well formed on a known channel without attributes, and
        so was checked, encoded and logged in one pass (batch.py): from its frame when the decoder
        left the events there, with no Python object per event, else from the decoded events."""
        pubend = self.pubend
        first = pubend.first_tick(wall_us)
        if msg.frame is not None:
            encoded = batch.encode_frame(msg.frame, msg.at, msg.count, self._trees, self.config.event_bytes_max,
                                         pubend.pubend_id, first, c.service, c.instance, c.authenticated)
        else:
            encoded = batch.encode(msg.events, self._trees, self.config.event_bytes_max, pubend.pubend_id, first,
                                   c.service, c.instance, c.authenticated)
        if encoded is None:
            return False
        records, deliveries, size, channel, ticks, table = encoded
        count = len(records)
        reserved = pubend.reserve(count, wall_us)
        assert reserved == first
        if channel is not None:
            self.traffic.tally(channel, count)
        else:
            assert deliveries is not None
            self.traffic.count([d[1] for d in deliveries])
        # the ACK's ticks are the run's (no Nones: every event was logged)
        self._append(c, msg.seq, ticks, batch.RecordRun(ticks, records, table), deliveries, size,  # type: ignore[arg-type]
                     out, channel=channel)
        return True

    def synced(self) -> list[int]:
        """A sync made pending bytes durable: the paused publishers, to be released once half are."""
        if not self.paused or self.pubend.pending_bytes > self.config.pending_sync_bytes_max // 2:
            return []
        conns = list(self.paused)
        self.paused.clear()
        return conns

    def lost(self, conn: int) -> None:
        """The connection `conn` is gone."""
        self.paused.pop(conn, None)

    def _publish_idempotent(self, now: int, c: ClientConnection, msg: messages.Publish, wall_us: int,
                            out: list[Effect]) -> None:
        """A PUBLISH with a producer id: the dedup window sorts its events out; the new ones are
        logged with their (producer, pseq) in the record, the others are answered with the tick
        they were logged with, once that tick is durable."""
        screen = self.dedup.screen(msg.producer, msg.events, wall_us, c.service)
        verdicts, ticks = screen.verdicts, screen.ticks
        valid, bad = self._check(now, c, screen.events, verdicts, screen.problems)
        for i in bad:  # refused (a duplicate too, past the rate): an ERROR and no tick, never both
            ticks[i] = None
        at = [i for i, verdict in enumerate(verdicts) if verdict is Verdict.NEW]  # where the valid ones are
        first = self.pubend.reserve(len(valid), wall_us) if valid else 0
        keys = self.dedup.logged(screen, at, first)
        duplicates, orphans = self.dedup.answer(screen, len(valid))
        orphaned = TidingsError("the event with the same producer sequence earlier in this PUBLISH was rejected",
                                errors.BAD_MESSAGE)
        if bad or orphans:
            c.refuse_events(now, msg.seq, {**bad, **dict.fromkeys(orphans, orphaned)}, out)
        self.events_rejected += len(verdicts) - len(valid) - len(duplicates)
        if valid:
            self._log(c, msg.seq, valid, first, ticks, out, keys, duplicates)
        elif not self.pubend.wait(c.conn, msg.seq, ticks, duplicates):  # nothing waits: all durable
            c.reply(messages.ack(msg.seq, self.pubend.pubend_id, ticks, duplicates), out)

    def _check(self, now: int, c: ClientConnection, events: list[object], verdicts: list[Verdict] | None,
               problems: dict[int, TidingsError] | None, refused: dict[int, TidingsError] | None = None,
               ) -> tuple[list[Good], dict[int, TidingsError]]:
        """The good events of `events`, and why each refused one was (by its index). With `verdicts`
        (an idempotent PUBLISH screened by the dedup window, which names its `problems`), only the
        new ones are checked, and each refused one is marked rejected there. `refused`: what the
        guard refused already (`Guard.admit_publish`); None: the guard is asked here."""
        valid: list[Good] = []
        problems_of: dict[int, TidingsError] = {}

        def refuse(i: int, problem: TidingsError) -> None:
            problems_of[i] = problem
            if verdicts is not None:
                verdicts[i] = Verdict.REJECTED

        if refused is None:
            refused = self.guard.check_publish(c.identity, events, now)  # rules, what a full bucket cannot hold
        known_channels, size_max, new = self._trees, self.config.event_bytes_max, Verdict.NEW
        known_attributes = self._attributes_ok
        if verdicts is None and not refused:  # the good events at the head in one tight pass
            valid = self._plain_head(events)
        for i, ev in enumerate(events[len(valid):] if valid else events, len(valid)):
            if verdicts is not None and verdicts[i] is not new:  # logged before, or rejected by the window
                problem = (problems or {}).get(i) if verdicts[i] is Verdict.REJECTED else refused.get(i)
                if problem is not None:  # (a duplicate too: past the rate, it is refused as a new event is)
                    refuse(i, problem)
                continue
            # fast path: a well-formed event on a channel seen before, without attributes to check
            if not refused and type(ev) is list and len(ev) == 3:
                channel, attributes, payload = ev
                if (type(channel) is str and channel in known_channels and type(payload) is bytes
                        and len(payload) <= size_max):
                    if attributes == {}:
                        valid.append((channel, attributes, payload))
                        continue
                    if one_attribute(attributes) in known_attributes:  # one attribute seen valid before
                        valid.append((channel, attributes, payload))
                        continue
            try:
                if i in refused:
                    raise refused[i]
                valid.append(self._checked(ev))
            except TidingsError as exc:
                refuse(i, exc)
        return valid, problems_of

    def _plain_head(self, events: list[object]) -> list[Good]:
        """The events at the head of `events` that `_check`'s fast path takes: well formed, on a
        channel seen before, without attributes or with one attribute seen valid before."""
        known_channels, size_max, known_attributes = self._trees, self.config.event_bytes_max, self._attributes_ok
        valid: list[Good] = []
        for ev in events:
            if type(ev) is not list or len(ev) != 3:
                break
            channel, attributes, payload = ev
            if (type(channel) is not str or channel not in known_channels or type(payload) is not bytes
                    or len(payload) > size_max):
                break
            if attributes != {} and one_attribute(attributes) not in known_attributes:
                break
            valid.append((channel, attributes, payload))
        return valid

    def _checked(self, ev: object) -> Good:
        """A published event checked whole (ProtocolError or TidingsError if it is not good)."""
        if type(ev) is not list or len(ev) != 3:
            raise ProtocolError(errors.BAD_MESSAGE, "a published event is [channel, attributes, payload]")
        channel, attributes, payload = ev
        if type(channel) is not str:
            raise ProtocolError(errors.BAD_CHANNEL, "the channel must be a string")
        if channel not in self._trees:
            self.trees_of(validate_channel(channel))
        if type(payload) is not bytes:
            raise ProtocolError(errors.BAD_MESSAGE, "the payload must be binary")
        if len(payload) > self.config.event_bytes_max:
            raise TidingsError(f"payload of {len(payload)} bytes exceeds event_bytes_max="
                               f"{self.config.event_bytes_max}", errors.EVENT_TOO_LARGE)
        if not attributes:
            return channel, {}, payload
        checked = validate_attributes(attributes)
        key = one_attribute(checked)
        if key is not None:  # remembered: the next event with the same one attribute skips the check
            known = self._attributes_ok
            if len(known) >= ATTRIBUTES_KNOWN_MAX:
                known.clear()
            known[key] = None
        return channel, checked, payload

    def _log(self, c: ClientConnection, seq: int, valid: list[Good], first: int, ticks: list[int | None],
             out: list[Effect], keys: list[bytes] | None = None, duplicates: list[int] | None = None) -> None:
        """Encode each event once and log the batch under ticks `first`, `first + 1`, ...; `ticks`
        is what its ACK will say, per event of the PUBLISH."""
        records = encode_records(self._packer.pack, self.pubend.pubend_id, first, valid, c.service, c.instance,
                                 c.authenticated)
        deliveries = [(t, ch, at, rec) for (t, rec), (ch, at, _) in zip(records, valid, strict=True)]
        self.traffic.count([ch for ch, _, _ in valid])
        self._append(c, seq, ticks, records, deliveries, sum(len(rec) for _, rec in records), out, keys, duplicates)

    def _append(self, c: ClientConnection, seq: int, ticks: list[int | None], records: Sequence[tuple[int, bytes]],
                deliveries: list[batch.Delivery] | None, size: int, out: list[Effect], keys: list[bytes] | None = None,
                duplicates: list[int] | None = None, channel: str | None = None) -> None:
        """Log the encoded batch (`size` bytes of `records`): the pubend holds its deliveries and
        ACK until it is durable; a publisher past pending_sync_bytes_max is not read meanwhile.
        `channel`: the batch's one channel, when no event has attributes (Pubend.log); then
        `deliveries` may be None, the records (a `batch.RecordRun`) standing for them."""
        pubend = self.pubend
        self.events_published += len(records)
        token = pubend.log(c.conn, seq, ticks, deliveries, size, duplicates, channel, records)
        if pubend.pending_bytes > self.config.pending_sync_bytes_max and c.conn not in self.paused:
            self.paused[c.conn] = None  # intake waits for the disk: memory stays bounded
            c.hold(Hold.DISK)
        if keys is None and type(records) is batch.RecordRun and len(out) >= 2:
            # the PUBLISH before it in this input ended the effects with its Append and Sync: one
            # Append of both runs (each its own batch record) and one Sync, so the log writer
            # takes an input's PUBLISHes with one write and one hand-off (`batch.merged`)
            last, before = out[-1], out[-2]
            if type(last) is Sync and type(before) is Append and before.keys is None and before.token == last.token:
                runs = batch.merged(before.records, records)
                if runs is not None:
                    out[-2] = Append(token, runs)
                    out[-1] = Sync(token)
                    return
        out.append(Append(token, records, keys))
        out.append(Sync(token))
