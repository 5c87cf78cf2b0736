"""Small durable-file helpers shared by the event log and the identity file.

A file replaced with `write_atomically` is either the old content or the new one after a crash at
any point, never a mix: the new bytes go to a temporary sibling, are fsynced, renamed over the
target (rename is atomic within a directory), and then the directory is fsynced so the rename itself
survives a power loss. Readers of such files can therefore treat any undecodable content as real
corruption rather than as a torn write.

`start_writeback` asks the kernel to begin writing a file's dirty range to the disk without
waiting (Linux's sync_file_range with SYNC_FILE_RANGE_WRITE, through ctypes: the os module has no
binding). It makes nothing durable and reports no failure: the fsync that follows waits for that
write, issues the disk's cache flush, and reports any error. Begun early, the write goes on while
the caller works, and the fsync finds it done or nearly (docs/benchmarks.md, "Stop 31").
"""

from __future__ import annotations

import ctypes
import os
import pathlib
from collections.abc import Callable

from tidings.core.errors import TidingsError

TEMP_SUFFIX = ".tmp"


class StorageError(TidingsError):
    """A storage engine cannot go on: the disk failed, or the log was used after close or a failure."""

    code = "storage"


class LogCorruptError(StorageError):
    """Bytes on disk that a crash cannot explain (not a torn tail): refuse to guess, name the place."""

    code = "log-corrupt"


SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writing the range's dirty pages, do not wait


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range, or None where there is none (not Linux, or a libc without it)."""
    try:
        func = ctypes.CDLL(None).sync_file_range
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_SYNC_FILE_RANGE = _sync_file_range()


def start_writeback(fd: int, offset: int, length: int) -> bool:
    """Begin writing `length` bytes of `fd` from `offset` to the disk, without waiting (the module's
    docstring); False where the system cannot (nothing is begun: the fsync then does it all). A
    failure to begin is not reported here: the fsync that must follow reports the disk's errors."""
    func = _SYNC_FILE_RANGE
    if func is None or length <= 0:
        return False
    return func(fd, offset, length, SYNC_FILE_RANGE_WRITE) == 0


def fsync_directory(directory: pathlib.Path) -> None:
    """Make creations, renames and removals of entries in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_directory(directory: pathlib.Path) -> None:
    """Create `directory` (and parents) if needed; each new entry is fsynced into its parent."""
    missing: list[pathlib.Path] = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for created in reversed(missing):
        created.mkdir(exist_ok=True)
        fsync_directory(created.parent)


def write_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Write every byte at `offset`: one pwrite in the normal case, more only after a short write."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:  # pragma: no cover - a regular file never answers 0 for a non-empty write
            raise StorageError(f"write made no progress at offset {offset}")
        view = view[written:]
        offset += written


def write_atomically(path: pathlib.Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content."""
    temp = path.with_name(path.name + TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_directory(path.parent)


def read_small_file(path: pathlib.Path) -> bytes | None:
    """The whole content of a small file, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
