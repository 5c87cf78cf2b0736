"""One broker per data directory: an exclusive lock held for the broker's whole life.

Two brokers on one directory would both append to the same pubend log and both acknowledge
publishes, interleaving ticks that no reader can put back in order: acknowledged events are lost.
So a broker takes `flock(LOCK_EX | LOCK_NB)` on `DIR/lock` before it reads anything there, and a
second one is refused at once with the pid of the holder. The kernel drops the lock when the holder
exits however it exits (even `kill -9`), so a crash never leaves a stale lock behind; the file
itself stays and is harmless. The descriptor is close-on-exec: a child process never inherits it.

After taking the lock the holder writes its pid into the file, so tools (`tidings cluster down`)
can find the broker that owns a directory without trusting any other record: `holder` reports that
pid while, and only while, the lock is held. Its probe takes a shared lock for an instant, so a
broker starting at that very moment may be refused once; it never lets two brokers in.
"""

from __future__ import annotations

import fcntl
import os
import pathlib

from tidings.storage.files import StorageError, ensure_directory

LOCK_FILE = "lock"
PID_BYTES_MAX = 32  # a pid and a newline, with room to spare


class DataDirectoryLocked(StorageError):
    """Another process holds the data directory: refuse to start rather than share its log."""

    code = "data-directory-locked"

    def __init__(self, directory: pathlib.Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"data directory {directory} is in use by another broker ({who}); "
                         f"stop that broker or choose another --data")
        self.directory = directory
        self.pid = pid


class DataDirectoryLock:
    """The held lock on one data directory; `release` (or process exit) lets the next broker in."""

    def __init__(self, directory: pathlib.Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: pathlib.Path) -> DataDirectoryLock:
        """Lock `directory` (created if missing) for this process, or raise DataDirectoryLocked."""
        directory = pathlib.Path(directory)
        ensure_directory(directory)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirectoryLocked(directory, holder(directory)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(directory, fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def __enter__(self) -> DataDirectoryLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(directory: pathlib.Path) -> int | None:
    """The pid of the process holding `directory`'s lock, or None when no process holds it.

    The pid read from the file is checked against /proc: it is returned only if that process has
    the lock file open, so a pid left by an earlier holder (the new one is between its flock and its
    write) or recycled since is never reported; that brief moment reads as 0, "held, pid unknown".
    """
    path = pathlib.Path(directory) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, PID_BYTES_MAX, 0).decode("ascii", "replace").strip()
            pid = int(text) if text.isdigit() else 0
            return pid if pid and _has_open(pid, os.fstat(fd)) else 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _has_open(pid: int, lock: os.stat_result) -> bool:
    """Whether process `pid` has the file `lock` open (True where /proc cannot tell)."""
    fd_dir = pathlib.Path(f"/proc/{pid}/fd")
    if not pathlib.Path("/proc/self/fd").is_dir():
        return True
    try:
        names = os.listdir(fd_dir)
    except OSError:  # gone, or not ours to inspect
        return False
    for name in names:
        try:
            st = os.stat(fd_dir / name)
        except OSError:
            continue
        if st.st_ino == lock.st_ino and st.st_dev == lock.st_dev:
            return True
    return False
