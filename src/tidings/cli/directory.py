"""`tidings directory forget`: remove a decommissioned broker's pubend from the overlay's pubend
directory (core/broker/directory.py, docs/cluster.md#the-pubend-directory).

The directory keeps a pubend whose broker is down, so that a Spark read knows it is incomplete; a
broker retired for good would then fail every read of its range. The operator forgets its pubend
through the data directory of another broker, stopped (the data directory's lock says so): the
tombstone is written into its saved directory, and once that broker is started again it gossips
the tombstone and every broker drops the pubend. Forgetting needs no credential on the wire, only
the file system access that running a broker needs. The directory as a broker holds it is in
`tidings status --json` (`directory`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from tidings.aio.server import DIRECTORY_FILE
from tidings.cli.common import EXIT_INPUT, CliError, emit
from tidings.core.broker.directory import DirectoryError, forget_saved
from tidings.storage import DataDirectoryLock, DataDirectoryLocked
from tidings.storage.files import read_small_file, write_atomically
from tidings.storage.identity import IDENTITY_FILE


def cmd_forget(args: argparse.Namespace) -> int:
    data = Path(args.data)
    identity = read_small_file(data / IDENTITY_FILE)
    if identity is None:
        raise CliError(f"{data} is not a broker's data directory (no {IDENTITY_FILE})", EXIT_INPUT)
    try:
        lock = DataDirectoryLock.acquire(data)
    except DataDirectoryLocked as exc:
        raise CliError(f"{exc}: stop that broker first (or use another's data directory)", EXIT_INPUT) from None
    with lock:
        try:
            saved = forget_saved(read_small_file(data / DIRECTORY_FILE), args.pubend,
                                 json.loads(identity)["pubend_id"], time.time_ns() // 1000)
        except DirectoryError as exc:
            raise CliError(str(exc), EXIT_INPUT) from None
        write_atomically(data / DIRECTORY_FILE, saved)
    emit({"forgotten": args.pubend, "data": str(data),
          "next": "start this broker: it tells the others, and every broker drops the pubend"})
    return 0


def add_parser(sub: Any) -> None:
    d = sub.add_parser("directory", help="the overlay's pubend directory (see `tidings status --json`)")
    dsub = d.add_subparsers(dest="directory_command", required=True)
    f = dsub.add_parser("forget", help="forget a decommissioned broker's pubend, through a stopped broker's data")
    f.add_argument("--data", required=True, help="the data directory of a stopped broker of the overlay")
    f.add_argument("pubend", help="the pubend id to forget (as `tidings status --json` lists it under directory)")
    f.set_defaults(func=cmd_forget)
