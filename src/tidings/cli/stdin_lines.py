"""`tidings pub` without a payload: one event per stdin line, published as each line arrives.

A thread reads lines and queues them; the publisher takes the first line as soon as it is there and,
with it, whatever else is already waiting (up to `BATCH_LINES_MAX`), so `tail -f | tidings pub`
publishes each line at once while a file piped in still goes out in large batches. A line longer
than `LINE_BYTES_MAX` is never held in memory whole: it is skipped to its end and reported as that
line's error, and the lines after it are published as usual.

The thread reads the file descriptor with os.read, not through sys.stdin's buffered reader: a
daemon thread blocked inside a buffered read holds its lock, and the interpreter then aborts at exit
(Ctrl-C would end in SIGABRT instead of a clean exit code 130).
"""

from __future__ import annotations

import os
import queue
import threading

from tidings.core.defaults import FRAME_BYTES_MAX

BATCH_LINES_MAX = 1000
READ_BYTES_MAX = 64 * 1024  # per os.read
LINE_BYTES_MAX = FRAME_BYTES_MAX  # the default frame_bytes_max: no longer line can be an event


class LineTooLong:
    """A line past LINE_BYTES_MAX, in the place of its text."""


TOO_LONG = LineTooLong()


class StdinLines:
    """Numbered lines of `stream` (1-based), their newline removed, in batches of what is waiting."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: queue.SimpleQueue[bytes | LineTooLong | None] = queue.SimpleQueue()
        self._number = 0
        self._ended = False
        threading.Thread(target=self._read, name="tidings-stdin", daemon=True).start()

    def _read(self) -> None:
        pending = bytearray()
        skipping = False  # inside a line already reported too long
        while chunk := os.read(self._fd, READ_BYTES_MAX):
            pending += chunk
            while (end := pending.find(b"\n")) >= 0:
                line = bytes(pending[:end]).removesuffix(b"\r")
                del pending[:end + 1]
                if skipping:
                    skipping = False
                elif len(line) > LINE_BYTES_MAX:
                    self._queue.put(TOO_LONG)
                else:
                    self._queue.put(line)
            if len(pending) > LINE_BYTES_MAX:
                if not skipping:
                    self._queue.put(TOO_LONG)
                    skipping = True
                pending.clear()
        if pending and not skipping:
            self._queue.put(bytes(pending))
        self._queue.put(None)  # the end of the input

    def batch(self) -> list[tuple[int, bytes | LineTooLong]]:
        """Wait for the next line, and return it with every line already waiting behind it (at most
        BATCH_LINES_MAX in all); an empty list at the end of the input."""
        out: list[tuple[int, bytes | LineTooLong]] = []
        if self._ended:
            return out
        item = self._queue.get()
        while item is not None:
            self._number += 1
            out.append((self._number, item))
            if len(out) >= BATCH_LINES_MAX:
                return out
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return out
        self._ended = True
        return out
