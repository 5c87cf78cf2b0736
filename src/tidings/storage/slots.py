"""A small state saved often and durably, at one fdatasync per save: two slots written in turn.

`write_atomically` (storage/files.py) replaces a file through a temporary sibling: a write, an
fsync, a rename and the directory's fsync, two flushes of the disk per save. That is right for a
file replaced now and then. The MQTT state (`mqtt.state`: a persistent session's QoS 2 keys, its
deliveries in flight, its deadlines and wills) is saved once per window of QoS 2 traffic, and a
QoS 2 PUBCOMP or PUBLISH waits for the save, so each flush is paid in every delivery's latency
and CPU.

`SlotPair` keeps the state in two files beside each other, `NAME.0` and `NAME.1`. Each save
overwrites the slot that does not hold the newest save: a header (a magic number, the save's number,
the content's length and a CRC-32 of these and the content) and then the content, written at offset 0, then `fdatasync`.
A crash can tear only the slot being written, and the other slot still holds the save before it
whole, so the reader takes the valid slot with the higher number; a save counts only once its
`save` has returned. A slot whose header or CRC does not check out is one a crash tore (or one
never written), never a reason to refuse to start: the other slot answers. A slot file is created
once and its entry made durable by the directory's fsync; afterwards it only grows when the content
does, and bytes past the header's length are left over from an older save and ignored.

A state saved by `write_atomically` under the plain name (before the slots) is read when neither
slot holds a valid save, and removed after the first save into the slots.
"""

from __future__ import annotations

import os
import pathlib
import struct
import zlib
from typing import Final

from tidings.storage.files import fsync_directory, read_small_file, write_all

MAGIC: Final = b"TDS1"
HEADER: Final = struct.Struct(">4sQII")  # magic, save number, content bytes, CRC-32 of the three before it
COVERED: Final = struct.Struct(">QI")  # what the CRC covers of the header: a torn header never checks out
SLOTS: Final = 2


def _crc(number: int, content: bytes) -> int:
    return zlib.crc32(content, zlib.crc32(COVERED.pack(number, len(content))))


def _decode(data: bytes | None) -> tuple[int, bytes] | None:
    """A slot's (save number, content), or None when it holds no whole save."""
    if data is None or len(data) < HEADER.size:
        return None
    magic, number, length, crc = HEADER.unpack_from(data)
    content = data[HEADER.size:HEADER.size + length]
    if magic != MAGIC or len(content) != length or _crc(number, content) != crc:
        return None
    return number, content


class SlotPair:
    """The newest save of a small state in two slot files, `path`.0 and `path`.1."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.slots = [path.with_name(f"{path.name}.{i}") for i in range(SLOTS)]
        self.number = 0  # the newest save's number (0: none)
        self.newest: int | None = None  # the slot holding it
        self.fds: list[int | None] = [None] * SLOTS
        self.plain_left = False  # the plain file of before the slots is there (known after `load`)

    def load(self) -> bytes | None:
        """The content of the newest whole save (or of the plain file saved before the slots), None
        when there is none; the next `save` goes to the other slot."""
        self.plain_left = self.path.exists()
        found = [(saved[0], i, saved[1]) for i, slot in enumerate(self.slots)
                 if (saved := _decode(read_small_file(slot))) is not None]
        if not found:
            return read_small_file(self.path)
        self.number, self.newest, content = max(found)
        return content

    def save(self, content: bytes) -> None:
        """Make `content` the newest save: on disk before this returns (one fdatasync)."""
        target = 0 if self.newest is None else 1 - self.newest
        fd = self.fds[target]
        if fd is None:
            created = not self.slots[target].exists()
            fd = os.open(self.slots[target], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self.fds[target] = fd
            if created:
                fsync_directory(self.path.parent)
        number = self.number + 1
        write_all(fd, HEADER.pack(MAGIC, number, len(content), _crc(number, content)) + content, 0)
        os.fdatasync(fd)
        self.number, self.newest = number, target
        if self.plain_left:  # the plain file of before the slots: superseded now
            self.path.unlink(missing_ok=True)
            fsync_directory(self.path.parent)
            self.plain_left = False

    def close(self) -> None:
        """Close the slot files (the saves stay on disk)."""
        for i, fd in enumerate(self.fds):
            if fd is not None:
                os.close(fd)
                self.fds[i] = None


def newest(path: pathlib.Path) -> bytes | None:
    """The newest whole save under `path` (for readers beside the owner, such as tests and tools)."""
    return SlotPair(path).load()
