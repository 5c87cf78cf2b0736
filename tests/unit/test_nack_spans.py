"""A nack answered from a span of the log (nack_answers.py, log_span.py): the span's payloads are
exactly what storage/record.py `records_in` reads from it, and the answer sends every tick and
payload the record-by-record answer sends, on trees with events of other channels among them."""

from __future__ import annotations

import itertools
import pathlib
import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.aio.storage_worker import log_state
from tidings.core.effects import ReadLog
from tidings.core.reliability.log_span import SpanError, payload_runs
from tidings.core.reliability.nack_answers import NackAnswers, ReadLimits
from tidings.core.reliability.source_knowledge import EventTails, KnowledgeWriter, PublishOnTree
from tidings.storage import EventLog, record

PUBEND = "p00000000000000ab"
FIRST_TICK = 1_700_000_000_000_000
TREES = {"a/x": ["a/#"], "a/y": ["a/#"], "b/x": ["b/#"], "a/long-" + "z" * 40: ["a/#"]}


def own_record(tick: int, channel: str, size: int, authenticated: bool = False) -> bytes:
    fields: list[object] = [PUBEND, tick, channel, {}, "s", "i", b"x" * size]
    return bytes(msgpack.packb([*fields, True] if authenticated else fields))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), batch=st.booleans(), keyed=st.booleans())
def test_payload_runs_hold_what_records_in_reads(data, batch, keyed):
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    records, tick = [], FIRST_TICK
    for _ in range(data.draw(st.integers(1, 60))):
        tick += rng.choice((1, 1, 1, 3))
        records.append((tick, bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40)))))
    keys = [b"k%d" % t for t, _ in records] if keyed else None
    span = record.encode(records, 0, 0, 1 << 62, 1 << 62, keys, batch=batch)[0]
    after = data.draw(st.integers(FIRST_TICK - 2, tick + 1))
    through = data.draw(st.integers(after, tick + 2))
    runs = payload_runs(span, after, through)
    got = [span[lo:hi] for _, offsets in runs for lo, hi in itertools.pairwise(offsets)]
    ticks = [first + i for first, offsets in runs for i in range(len(offsets) - 1)]
    assert got == [bytes(p) for p in record.records_in(span, after, through)]
    assert ticks == [t for t, _ in records if after < t <= through]


def test_a_damaged_span_is_refused():
    records = [(FIRST_TICK + i, b"payload %d" % i) for i in range(10)]
    span = bytearray(record.encode(records, 0, 0, 1 << 62, 1 << 62, batch=True)[0])
    span[-3] ^= 0xFF
    with pytest.raises(SpanError, match="checksum"):
        payload_runs(bytes(span), 0, FIRST_TICK + 10)
    with pytest.raises(SpanError, match="runs past"):
        payload_runs(bytes(span[:-1]), 0, FIRST_TICK + 10)


def fill(log: EventLog, rng: random.Random, count: int) -> None:
    """Batches as publishers log them: mostly one channel, some mixed, some keyed, some authenticated."""
    tick, written = FIRST_TICK, 0
    channels = list(TREES)
    while written < count:
        n = rng.randint(1, 50)
        mixed = rng.random() < 0.3
        channel = rng.choice(channels)
        authenticated = rng.random() < 0.1
        batch = [(tick + k, own_record(tick + k, rng.choice(channels) if mixed else channel, rng.randint(0, 300),
                                       authenticated)) for k in range(n)]
        log.append(batch, [b"key%d" % t for t, _ in batch] if rng.random() < 0.2 else None)
        tick += n + rng.choice((0, 0, 5))
        written += n
    log.sync()


def answer(log: EventLog, tree: str, after: int, through: int, span: bool,
           read_bytes_max: int) -> list[PublishOnTree]:
    """Every message the pubend sends to answer one nack of (after, through] on `tree`, each read
    served at once by `log` (as records, or as the span the ReadLog asks for when `span`)."""
    writer = KnowledgeWriter(PUBEND, "127.0.0.1:1", 64 * 1024, TREES.__getitem__)
    tails = EventTails(16)
    tails.recover(log.last_tick)
    answers = NackAnswers(ReadLimits(read_bytes_max, 4, 1 << 40, 10**9), writer, tails, lambda _: False)
    state = log_state(log)
    effects: list[object] = list(answers.nacked(0, tree, [(after, through)], log.last_tick, state, None))
    sent: list[PublishOnTree] = []
    while effects:
        eff = effects.pop(0)
        if isinstance(eff, PublishOnTree):
            sent.append(eff)
            continue
        assert isinstance(eff, ReadLog) and eff.span
        found = log.read_span(eff.after, eff.max_bytes, eff.through) if span else None
        records = log.read(eff.after, eff.max_bytes, eff.through) if found is None else []
        effects += answers.log_read(0, eff.reader, records, state, found)
    return sent


@pytest.mark.parametrize("seed", range(4))
def test_a_span_answer_sends_what_a_record_answer_sends(tmp_path: pathlib.Path, seed: int) -> None:
    rng = random.Random(seed)
    log = EventLog.open(tmp_path, segment_bytes_max=256 * 1024)
    try:
        fill(log, rng, 3000)
        for tree in ("a/#", "b/#"):
            after = rng.randint(0, FIRST_TICK + 500)
            through = rng.randint(FIRST_TICK + 1000, log.last_tick + 10)
            read_bytes_max = rng.choice((2000, 20_000, 1 << 20))
            by_span = answer(log, tree, after, through, True, read_bytes_max)
            by_record = answer(log, tree, after, through, False, read_bytes_max)
            for sent in (by_span, by_record):  # the messages tile the range asked (to the durable tail)
                assert sent[0].message.after == after
                assert sent[-1].message.through == min(through, log.last_tick)
                assert all(m.message.through == n.message.after for m, n in itertools.pairwise(sent))
            events = [(t, r) for s in by_span for t, r in zip(s.message.ticks, s.message.records, strict=True)]
            assert events == [(t, r) for s in by_record for t, r in zip(s.message.ticks, s.message.records,
                                                                        strict=True)]
            assert events and all(TREES[msgpack.unpackb(r)[2]] == [tree] and after < t <= through for t, r in events)
            assert len(events) == sum(1 for t, r in log.read(after, 1 << 40, through)
                                      if TREES[msgpack.unpackb(r)[2]] == [tree])
    finally:
        log.close()


def test_a_damaged_span_leaves_the_read_to_fail(tmp_path: pathlib.Path) -> None:
    """The caller (source.py) fails the read on SpanError: the read is still there to fail."""
    log = EventLog.open(tmp_path)
    try:
        fill(log, random.Random(1), 100)
        writer = KnowledgeWriter(PUBEND, "127.0.0.1:1", 64 * 1024, TREES.__getitem__)
        answers = NackAnswers(ReadLimits(1 << 20, 4, 1 << 40, 10**9), writer, EventTails(16), lambda _: False)
        state = log_state(log)
        (read,) = [e for e in answers.nacked(0, "a/#", [(0, log.last_tick)], log.last_tick, state, None)
                   if isinstance(e, ReadLog)]
        found = log.read_span(read.after, read.max_bytes, read.through)
        assert found is not None
        with pytest.raises(SpanError):
            answers.log_read(0, read.reader, [], state, (found[0], found[1][:-1]))
        assert answers.owns_read(read.reader)
        answers.read_failed(read.reader)
        assert not answers.owns_read(read.reader) and answers.status()["reads"] == 0
    finally:
        log.close()
