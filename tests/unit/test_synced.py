"""A sync's events as the fan-out and the trees take them (core/synced.py) on its own."""

from __future__ import annotations

import pytest

from tidings.core.publish import batch
from tidings.core.publish.pubend import PendingBatch
from tidings.core.synced import Synced
from tidings.core.wire import messages

from .core_harness import Harness


def held(token: int, channel: str, ticks: range) -> PendingBatch:
    """A batch on one channel without attributes, held as the Append's run (ticks, records)."""
    records = [b"r%d" % t for t in ticks]
    return PendingBatch(token, 1, token, list(ticks), [], sum(map(len, records)), channel=channel,
                        records=batch.RecordRun(list(ticks), records, batch.batch_table(records)))


def duplicates_only(token: int) -> PendingBatch:
    """A batch that logged nothing: its events were answered with earlier ticks."""
    return PendingBatch(token, 1, token, [3], [], 0, duplicates=[0])


def test_a_sync_on_one_channel_gives_its_columns_and_their_bytes_once():
    synced = Synced([held(1, "a", range(10, 13)), duplicates_only(2), held(3, "a", range(13, 15))])
    assert synced.channel == "a" and synced.logged
    ticks, records = synced.columns()
    assert ticks == [10, 11, 12, 13, 14] and records == [b"r10", b"r11", b"r12", b"r13", b"r14"]
    assert synced.columns()[0] is ticks and synced.columns()[1] is records  # built once, shared
    assert synced.size() == sum(map(len, records)) == 15


def test_a_sync_of_several_channels_or_of_events_held_one_by_one_has_no_one_channel():
    assert Synced([held(1, "a", range(10, 12)), held(2, "b", range(12, 13))]).channel is None
    assert Synced([held(1, "a", range(10, 12)), PendingBatch(2, 1, 2, [12], [(12, "a", {}, b"r")], 0)]).channel is None
    mixed = Synced([PendingBatch(1, 1, 1, [10], [(10, "a", {"n": 1}, b"r")], 0)])
    assert mixed.channel is None and mixed.logged
    with pytest.raises(AssertionError):
        mixed.columns()


def test_a_sync_of_duplicates_only_logged_nothing():
    synced = Synced([duplicates_only(1)])
    assert not synced.logged and synced.channel is None
    assert not Synced([]).logged


@pytest.mark.parametrize("native", [True, False])
def test_the_intakes_batches_count_the_bytes_of_the_records_they_hold(native: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`Synced.size` is the batches' own counts: the intake's batch on one channel holds exactly
    `size` bytes of records (its C pass and its Python form alike), so the EVENTS frame written
    from it is whole: a live subscriber on the same broker decodes every event."""
    if not native:
        monkeypatch.setattr(batch, "encode", batch.encode_python)
    h = Harness()
    h.connect(1)
    h.connect(2)
    h.subscribe(2, "a/x")
    h.publish(1, ("a/x", b"first", {}))  # (the channel's first PUBLISH learns it: checked event by event)
    h.sync()
    h.inbox(2)
    for count in (1, 3, 100):
        h.publish(1, *[("a/x", b"p" * (count % 7), {})] * count)
        pending = list(h.broker.pubend._pending)
        assert pending and all(b.channel == "a/x" and b.records is not None for b in pending)
        synced = Synced(pending)
        assert synced.size() == sum(len(record) for record in synced.columns()[1])
        h.sync()
        events = [m for m in h.inbox(2) if isinstance(m, messages.Events)]
        assert sum(len(m.records) for m in events) == count
