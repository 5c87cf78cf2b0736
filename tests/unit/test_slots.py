"""storage/slots.py: a small state saved into two slots in turn, one fdatasync a save; the newest
whole save is what a restart reads, whatever a crash tore, and a state saved under the plain name
before the slots is read once and superseded."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.storage.files import write_atomically
from tidings.storage.slots import HEADER, SlotPair, newest


def test_no_save_reads_as_none(tmp_path):
    assert SlotPair(tmp_path / "s").load() is None


def test_saves_alternate_and_the_newest_is_read_after_a_restart(tmp_path):
    pair = SlotPair(tmp_path / "s")
    pair.load()
    for i in range(5):
        pair.save(b"state %d" % i * (i + 1))
    pair.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.0", "s.1"]
    again = SlotPair(tmp_path / "s")
    assert again.load() == b"state 4" * 5
    again.save(b"shorter")  # over the slot of save 3, longer than this: its tail is left and ignored
    again.close()
    assert newest(tmp_path / "s") == b"shorter"
    assert os.path.getsize(tmp_path / "s.1") > HEADER.size + len(b"shorter")


def test_a_torn_newest_slot_gives_the_save_before_it(tmp_path):
    pair = SlotPair(tmp_path / "s")
    pair.load()
    pair.save(b"first")
    pair.save(b"second, torn")
    pair.close()
    torn = bytearray((tmp_path / "s.1").read_bytes())
    torn[-3] ^= 0xFF  # the content no longer matches its CRC
    (tmp_path / "s.1").write_bytes(bytes(torn))
    again = SlotPair(tmp_path / "s")
    assert again.load() == b"first"
    again.save(b"third")  # into the torn slot, not over the good one
    again.close()
    assert newest(tmp_path / "s") == b"third"
    (tmp_path / "s.1").write_bytes(b"")  # and a slot cut short reads as nothing
    assert newest(tmp_path / "s") == b"first"


def test_the_plain_file_of_before_the_slots_is_read_then_superseded(tmp_path):
    write_atomically(tmp_path / "s", b"old format")
    pair = SlotPair(tmp_path / "s")
    assert pair.load() == b"old format"
    pair.save(b"new")
    pair.close()
    assert not (tmp_path / "s").exists()
    assert newest(tmp_path / "s") == b"new"


def test_a_slot_beats_a_plain_file_left_by_a_crash_before_its_removal(tmp_path):
    pair = SlotPair(tmp_path / "s")
    pair.load()
    pair.save(b"slot")
    pair.close()
    write_atomically(tmp_path / "s", b"plain")
    assert newest(tmp_path / "s") == b"slot"


@settings(max_examples=60, deadline=None)
@given(saves=st.lists(st.binary(max_size=300), min_size=1, max_size=8), cut=st.integers(0, 400),
       flip=st.booleans())
def test_whatever_tears_the_slot_being_written_the_last_whole_save_is_read(tmp_path_factory, saves, cut, flip):
    """A crash during a save leaves its slot with any prefix of the new bytes over the old ones (or
    a flipped byte): the reader answers the save before it, never a mix."""
    base = tmp_path_factory.mktemp("slots") / "s"
    pair = SlotPair(base)
    pair.load()
    for data in saves:
        pair.save(data)
    pair.close()
    torn_content = b"x" * 50
    target = base.with_name("s.0" if len(saves) % 2 == 0 else "s.1")  # where the next save goes
    old = target.read_bytes() if target.exists() else b""
    new = HEADER.pack(b"TDS1", len(saves) + 1, len(torn_content), 0) + torn_content  # its CRC never matches
    written = new[:cut] + old[cut:] if cut < len(new) else new
    if flip and written:
        written = bytes([written[0] ^ 1]) + written[1:]
    target.write_bytes(written)
    assert newest(base) == saves[-1]


SAVER = """
import pathlib, sys
from tidings.storage.slots import SlotPair
pair = SlotPair(pathlib.Path(sys.argv[1]))
pair.load()
for i in range(1, 1_000_000):
    pair.save(b"%d:" % i + b"y" * (i % 700))
    print(i, flush=True)
"""


def test_a_kill_9_while_saving_loses_no_save_that_returned(tmp_path):
    """A real process saves as fast as it can and says each save's number once `save` returned; it
    is killed -9 mid-stream, and the newest save read afterwards is that one or a later one."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for attempt in range(3):
        path = tmp_path / f"s{attempt}"
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        returned = 0
        for line in proc.stdout:  # bounded: the saver stops only when killed
            returned = int(line)
            if returned >= 50 + 40 * attempt:
                break
        proc.kill()
        proc.wait(timeout=10)
        saved = newest(pathlib.Path(path))
        assert saved is not None
        number = int(saved.split(b":", 1)[0])
        assert number >= returned
        assert saved == b"%d:" % number + b"y" * (number % 700)
