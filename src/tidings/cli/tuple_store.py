"""`tidings tuple-store`: run the PLDB tuple store (tidings.pldb.tuple_store) against a broker.

It prints one line once its three durable subscriptions are in place, then serves until SIGTERM or
Ctrl-C. Its state, positions included, is in the SQLite file `--db`: run it again with the same
file to go on exactly where its last transaction left off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any

from tidings.pldb.tuple_store import serve


def cmd_tuple_store(args: argparse.Namespace) -> int:
    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve(args.broker, Path(args.db), name=args.name,
                        ready=lambda: print(f"tuple store {args.name} ready at {args.broker} (state in {args.db})",
                                            flush=True))

    asyncio.run(main())
    return 0


def add_parser(sub: Any) -> None:
    ts = sub.add_parser("tuple-store", help="run the PLDB tuple store: hosts' latest properties in SQLite, "
                        "answers to pldb/query/<id> on pldb/answer/<id>, recommendations recorded")
    ts.add_argument("--broker", required=True, help="HOST:PORT of the broker it subscribes and answers through")
    ts.add_argument("--db", required=True, help="its SQLite file (created if missing; positions are kept in it)")
    ts.add_argument("--name", default="tuple-store",
                    help="instance name, also naming its answers (default %(default)s)")
    ts.set_defaults(func=cmd_tuple_store)
