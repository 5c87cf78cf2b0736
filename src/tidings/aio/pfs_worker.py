"""Runs the persistent filtering subsystem's writes, syncs, chops and reads on one thread.

The core's PfsAppend, PfsChop and ReadPfs effects (reliability/constream.py) queue work here; the
thread performs it in order. Appends are synced in groups: when the queue runs dry, every stream
written since its last sync is marked up to the tick it is known through (`PfsStream.mark`) and
synced, so one fsync covers whatever arrived meanwhile. A read first syncs its stream, so its
answer covers everything appended before it was asked. The PFS lives in `<data>/pfs` and starts
empty at each start: its coverage is the core's, kept in memory (constream.py).

A failing PFS is not a failing broker: the PFS is an optimisation over refiltering, so an error
is logged, the stream dropped and never written again until the broker restarts (a stream with a
hole would say "no match" for ticks it never saw), and reads of it answered as failed (the catchup
refilters).
"""

from __future__ import annotations

import logging
import pathlib
import queue
import shutil
import threading
from collections.abc import Callable
from typing import Any

from tidings.storage.pfs import Pfs

logger = logging.getLogger(__name__)

_STOP = object()
ReadDone = Callable[[tuple[int, ...], int, int], None]  # ticks, through (-1: failed), released_through


class PfsWorker:
    def __init__(self, directory: pathlib.Path) -> None:
        shutil.rmtree(directory, ignore_errors=True)
        self.pfs = Pfs.open(directory)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tidings-pfs", daemon=True)
        self._through: dict[str, int] = {}  # streams written since their last sync -> known through
        self._broken: set[str] = set()
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def append(self, stream: str, entries: list[tuple[int, list[int]]], through: int) -> None:
        self._queue.put(("append", (stream, entries, through)))

    def chop(self, stream: str, through: int | None) -> None:
        self._queue.put(("chop", (stream, through)))

    def read(self, stream: str, registration: int, after: int, count_max: int, done: ReadDone) -> None:
        self._queue.put(("read", (stream, registration, after, count_max, done)))

    def stop(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()
        self.pfs.close()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            kind, arg = item
            try:
                getattr(self, "_" + kind)(*arg)
            except Exception as exc:  # a bad PFS stream must not stop the broker
                self._failed(arg[0], exc)
                if kind == "read":
                    arg[-1]((), -1, 0)
            if self._queue.empty():
                self._sync_all()

    def _append(self, stream: str, entries: list[tuple[int, list[int]]], through: int) -> None:
        if stream in self._broken:
            return
        self.pfs.stream(stream).append_many(entries)
        self._through[stream] = max(through, self._through.get(stream, 0))

    def _chop(self, stream: str, through: int | None) -> None:
        if through is None:
            self._through.pop(stream, None)
            self.pfs.drop(stream)
        elif stream in self.pfs.pubends():
            self.pfs.stream(stream).chop(through)

    def _read(self, stream: str, registration: int, after: int, count_max: int, done: ReadDone) -> None:
        if stream not in self.pfs.pubends() or stream in self._broken:
            done((), -1, 0)
            return
        self._sync(stream)
        answer = self.pfs.stream(stream).read(registration, after, count_max)
        done(answer.ticks, answer.through_tick, answer.released_through)

    def _sync_all(self) -> None:
        for stream in list(self._through):
            try:
                self._sync(stream)
            except Exception as exc:
                self._failed(stream, exc)

    def _sync(self, stream: str) -> None:
        through = self._through.pop(stream, None)
        if through is not None:
            pfs_stream = self.pfs.stream(stream)
            pfs_stream.mark(through)
            pfs_stream.sync()

    def _failed(self, stream: str, exc: BaseException) -> None:
        self.failures += 1
        self._broken.add(stream)
        logger.error("PFS stream %s failed (%r): dropped; durable catchups on it refilter", stream, exc)
        self._through.pop(stream, None)
        try:
            self.pfs.drop(stream)
        except Exception:
            logger.exception("cannot drop PFS stream %s", stream)
