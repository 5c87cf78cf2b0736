"""Keyed records in the pubend log (storage/record.py): readers see the event alone, the keys of
the tail rebuild the dedup window after a crash, and a torn keyed tail is cut like any other."""

from __future__ import annotations

import os
import pathlib

from tidings.aio.storage_worker import restore_dedup
from tidings.core.publish.dedup import DedupWindow, encode_key
from tidings.storage import EventLog, record
from tidings.storage.segment import SUFFIX

HUGE = 1 << 40


def test_keyed_records_read_back_as_events_and_keys(tmp_path: pathlib.Path) -> None:
    with EventLog.open(tmp_path) as log:
        log.append([(10, b"plain")])
        log.append([(11, b"e11"), (12, b"e12")], [encode_key("p", 0), encode_key("p", 1)])
        log.append([(13, b"plain too")])
        log.sync()
        assert log.read(0, HUGE) == [(10, b"plain"), (11, b"e11"), (12, b"e12"), (13, b"plain too")]
        assert log.read(0, HUGE, keys=True) == [(11, encode_key("p", 0)), (12, encode_key("p", 1))]
        assert log.read(11, HUGE, keys=True) == [(12, encode_key("p", 1))]
    with EventLog.open(tmp_path) as log:  # closed segments and summaries hold keyed records too
        assert log.read(10, HUGE) == [(11, b"e11"), (12, b"e12"), (13, b"plain too")]


def test_the_window_is_rebuilt_from_the_tail_only(tmp_path: pathlib.Path) -> None:
    now_us = 10_000_000
    with EventLog.open(tmp_path, segment_bytes_max=200) as log:  # a few segments
        for k in range(40):
            tick = now_us - 4_000 + 100 * k  # 100 us apart, the last 100 us ago
            log.append([(tick, b"event")], [encode_key(f"p{k % 3}", k)])
        log.sync()
        window = DedupWindow(window_us=1_000, entries_max=100, producers_max=10)
        assert restore_dedup(window, log, now_us) == 9  # ticks above now - 1000
        assert window.lookup("p1", 31) == now_us - 900 and window.lookup("p0", 30) is None


def test_a_torn_keyed_tail_is_cut_at_the_last_whole_record(tmp_path: pathlib.Path) -> None:
    with EventLog.open(tmp_path) as log:
        log.append([(1, b"a")], [encode_key("p", 1)])
        log.append([(2, b"b")], [encode_key("p", 2)])
        log.sync()
    (segment,) = [p for p in tmp_path.iterdir() if p.name.endswith(SUFFIX)]
    size = segment.stat().st_size
    with open(segment, "r+b") as f:
        f.truncate(size - 3)
        os.fsync(f.fileno())
    with EventLog.open(tmp_path) as log:
        assert log.read(0, HUGE) == [(1, b"a")]
        assert log.recovery.bytes_cut == size - 3 - record.HEADER_BYTES - len(b"a") - len(encode_key("p", 1)) - 2


def test_a_corrupt_segment_is_skipped_and_the_others_rebuild_the_window(tmp_path: pathlib.Path) -> None:
    now_us = 10_000_000
    with EventLog.open(tmp_path, segment_bytes_max=200) as log:
        for k in range(12):
            log.append([(now_us - 1000 + k, b"event")], [encode_key("p", k)])
        log.sync()
        first_segment = log.segments()[0]
    path = tmp_path / first_segment.name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with EventLog.open(tmp_path, segment_bytes_max=200) as log:
        window = DedupWindow(window_us=10_000, entries_max=100, producers_max=10)
        assert restore_dedup(window, log, now_us) == 12 - first_segment.record_count
        assert window.lookup("p", 0) is None and window.lookup("p", 11) == now_us - 1000 + 11
