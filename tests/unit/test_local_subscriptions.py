"""The table of local subscriptions (core/subscription/table.py) on its own."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.auth.guard import Guard
from tidings.core.effects import Send
from tidings.core.filters import parse_filter
from tidings.core.publish.batch import RecordRun
from tidings.core.publish.pubend import PendingBatch
from tidings.core.subscription.leases import EndSubscription
from tidings.core.subscription.table import LocalSubscriptions, Reader
from tidings.core.synced import Synced
from tidings.core.wire import decoders, messages


def _open(table: LocalSubscriptions, sub: int, end: int | None = None) -> int:
    s = table.open(7, sub, "me", "a/#", None, 0, end, from_oldest=False, total=False, bulk=False, spans=False)
    return s.key


def test_readers_are_told_apart_by_the_keys_the_table_gave():
    table = LocalSubscriptions(Guard.open())
    assert table.reader(1) is Reader.PUBEND  # no key given yet
    first, second = _open(table, 1), _open(table, 2)
    assert (first, second) == (1, 2)
    assert table.reader(first) is Reader.SUBSCRIPTION
    assert table.reader(-1) is Reader.PUBEND and table.reader(0) is Reader.PUBEND and table.reader(3) is Reader.PUBEND
    table.joined(table.subends[first])
    table.drop(table.subends[first])
    assert table.reader(first) is Reader.GONE  # ended while its read was in flight: not the pubend's


def test_a_failed_read_tells_the_client_and_ends_the_subscription_away():
    table = LocalSubscriptions(Guard.open())
    key = _open(table, 4)
    effects = table.read_failed(key, "disk on fire")
    assert isinstance(effects[0], Send) and effects[1] == EndSubscription(7, 4, ended=False)
    error = decoders.decode_broker_message(effects[0].data[4:])
    assert isinstance(error, messages.Error) and error.code == "log-unreadable" and error.context["sub"] == 4
    assert table.read_failed(key + 1, "unknown") == []


def test_bounded_subscriptions_leave_no_index_entry_and_no_tree():
    table = LocalSubscriptions(Guard.open())
    bounded = table.subends[_open(table, 1, end=5)]
    live = table.subends[_open(table, 2)]
    table.joined(live)
    assert len(table.index) == 1
    assert table.drop(bounded) is False and table.drop(live) is True
    assert len(table.index) == 0 and table.subends == {}


# ---- this broker's own events as they become durable (synced) ------------------------------------

OWN = "me"
SYNCED_AT_START = 100
CHANNELS = ("a/x", "a/y", "b/z")
PATTERNS = ("a/#", "a/x", "#", "b/z", "a/y")
FILTERS = (None, "n > 2", "n = 1")


def _reference_synced(table: LocalSubscriptions, batches: list[PendingBatch], synced_tick: int) -> list[Send]:
    """What synced must give, written plainly: per event, each live subscription it matches past
    its position gets it; then each subscription (in the order of its first record) its frames."""
    fan: dict[int, list[bytes]] = {}
    for batch in batches:
        for tick, channel, attributes, record in batch.events():
            for key in table.index.match(channel, attributes):
                s = table.subends[key]
                if s.live and tick > s.position:
                    fan.setdefault(key, []).append(record)
    return [Send(table.subends[key].conn, frame) for key, records in fan.items()
            for frame in messages.events_frames(table.subends[key].sub, records)]


subscriptions = st.lists(st.tuples(st.sampled_from(PATTERNS), st.sampled_from(FILTERS),
                                   st.integers(SYNCED_AT_START - 5, SYNCED_AT_START + 30), st.booleans()),
                         min_size=1, max_size=8)
events = st.lists(st.tuples(st.sampled_from(CHANNELS), st.integers(0, 4)), min_size=1, max_size=40)


def _batch(k: int, deliveries: list[tuple[int, str, dict[str, int], bytes]], hold: bool) -> PendingBatch:
    """A durable batch of `deliveries`; `hold`: held as the Append's run (ticks, records), as the
    intake holds a PUBLISH whose events are on one channel without attributes, when they are."""
    if hold and len({channel for _, channel, _, _ in deliveries}) == 1 and not any(a for _, _, a, _ in deliveries):
        return PendingBatch(k, 1, k, [], [], sum(len(record) for _, _, _, record in deliveries),
                            channel=deliveries[0][1],
                            records=RecordRun([d[0] for d in deliveries], [d[3] for d in deliveries], None))
    return PendingBatch(k, 1, k, [], deliveries, 0)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(subscriptions, events, st.integers(1, 4), st.booleans(), st.booleans())
def test_own_events_reach_each_live_subscription_they_match_past_its_position_in_order(subs, evs, cuts, hold, narrow):
    """A subscription live from a position past the durable tail skips the ticks up to it; one still
    catching up gets nothing (it reads the log); each gets its events in tick order, whatever
    channels and filters interleave; the effects leave in the order of each one's first event.
    (Each on a connection of its own, with sub ids 1 and 2 as clients number them.) Batches on
    one channel without attributes held as their records (`hold`), a sync of them all on one
    channel taken as one run (core/synced.py), give the same (`narrow`: every event on the first
    channel, without attributes)."""
    if narrow:
        evs = [(CHANNELS[0], 0) for _ in evs]
    table = LocalSubscriptions(Guard.open())
    for i, (pattern, flt, position, live) in enumerate(subs):
        s = table.open(10 + i, 1 + i % 2, OWN, pattern, None if flt is None else parse_filter(flt),
                       position if live else SYNCED_AT_START - 5, None, from_oldest=False, total=False,
                       bulk=False, spans=False)
        table.joined(s)
        table.advance(s, False, SYNCED_AT_START, 1 << 20)
        assert s.live is (live and position >= SYNCED_AT_START)
    records = [(SYNCED_AT_START + 1 + i, channel, {"n": n} if n else {},
                msgpack.packb([OWN, SYNCED_AT_START + 1 + i, channel, {"n": n} if n else {}, "s", "i", b"p"]))
               for i, (channel, n) in enumerate(evs)]
    size = -(-len(records) // cuts)
    batches = [_batch(k, records[at:at + size], hold) for k, at in enumerate(range(0, len(records), size))]
    synced_tick = records[-1][0]
    expected = _reference_synced(table, batches, synced_tick)
    delivered = sum(len(decoders.decode_broker_message(e.data[4:]).records) for e in expected)
    moved = {key: synced_tick for key in {k for k, s in table.subends.items() if s.live}
             if any(e.conn == table.subends[key].conn for e in expected)}
    assert table.synced(Synced(batches), OWN, synced_tick) == expected
    assert table.events_delivered == delivered
    for key, s in table.subends.items():
        assert s.position == moved.get(key, s.position)


def test_subscribers_of_the_same_events_under_the_same_sub_id_share_one_encoding_of_their_frames():
    table = LocalSubscriptions(Guard.open())
    subs = [table.open(10 + i, 1 if i < 3 else 2, OWN, "a/#", None, SYNCED_AT_START, None, from_oldest=False,
                       total=False, bulk=False, spans=False) for i in range(4)]
    for s in subs:
        table.joined(s)
        table.advance(s, False, SYNCED_AT_START, 1 << 20)
    records = [(SYNCED_AT_START + t, "a/x", {}, msgpack.packb([OWN, SYNCED_AT_START + t, "a/x", {}, "s", "i", b"p"]))
               for t in (1, 2)]
    sends = table.synced(Synced([PendingBatch(1, 1, 1, [], records, 0)]), OWN, SYNCED_AT_START + 2)
    assert [e.conn for e in sends] == [10, 11, 12, 13]
    assert sends[0].data is sends[1].data is sends[2].data  # one encoding for sub 1's three connections
    first, last = (decoders.decode_broker_message(e.data[4:]) for e in (sends[0], sends[3]))
    assert (first.sub, last.sub) == (1, 2) and first.records == last.records
