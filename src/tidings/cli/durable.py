"""`tidings durable list` and `tidings durable forget NAME`: the named durable subscriptions a
broker hosts, and ending one for good.

A named durable subscription (docs/durable.md, a Spark streaming query's `durableName`) holds its
events at its broker until it is forgotten or has been away for `durable_expiry_ns`. A query
stopped for good leaves one behind. `list` shows them from the broker's status (`durable_named`);
`forget` ends one as its owner would: it subscribes with the subscription's name, pattern and
filter as its owner's service and closes it with forget, then checks the broker's status until
the subscription is gone.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from tidings.cli.common import EXIT_BROKER, EXIT_INPUT, CliError, emit

FORGET_S_MAX = 10.0  # how long `forget` waits for the broker's status to drop the subscription
POLL_S = 0.05

Connect = Callable[..., Any]  # cli/main.py's _connect(args, follow_advice=...)


def add_parser(sub: Any, client_options: Callable[[argparse.ArgumentParser], None], connect: Connect) -> None:
    du = sub.add_parser("durable", help="list the named durable subscriptions a broker hosts, or forget one")
    dsub = du.add_subparsers(dest="action", required=True)
    ls = dsub.add_parser("list", help="the broker's named durable subscriptions: owner, name, pattern, "
                         "filter, connected or away since when")
    client_options(ls)
    ls.add_argument("--json", action="store_true", help="one JSON object per subscription")
    ls.set_defaults(func=lambda args: cmd_list(args, connect))
    fg = dsub.add_parser("forget", help="end a named durable subscription for good: its broker stops "
                         "holding its events (e.g. one left by a stopped Spark query)")
    fg.add_argument("name", help="the subscription's name (a Spark query's durableName)")
    client_options(fg)
    fg.add_argument("--owner", help="the service that owns it, when several services use the name "
                    "(a Spark query's is spark)")
    fg.set_defaults(func=lambda args: cmd_forget(args, connect))


def named(status: dict[str, Any]) -> list[dict[str, Any]]:
    """The broker's named durable subscriptions; CliError when the broker does not report them."""
    found = status.get("durable_named")
    if not isinstance(found, list):
        raise CliError("this broker does not list its durable subscriptions (an older tidings?)", EXIT_BROKER)
    return [entry for entry in found if isinstance(entry, dict)]


def cmd_list(args: argparse.Namespace, connect: Connect) -> int:
    with connect(args, follow_advice=False) as client:
        entries = named(client.status())
    if args.json:
        for entry in entries:
            emit(entry)
        return 0
    if not entries:
        print("no named durable subscriptions")
        return 0
    rows = [("owner", "name", "pattern", "filter", "state")]
    rows += [(str(e.get("owner")), str(e.get("name")), str(e.get("pattern")), str(e.get("filter") or "-"),
              _state(e)) for e in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])
    return 0


def _state(entry: dict[str, Any]) -> str:
    if entry.get("connected"):
        return "connected"
    away = entry.get("away_us")
    if type(away) is not int or away <= 0:
        return "away"
    return "away since " + dt.datetime.fromtimestamp(away / 1e6, dt.UTC).isoformat(timespec="seconds")


def cmd_forget(args: argparse.Namespace, connect: Connect) -> int:
    with connect(args, follow_advice=False) as client:
        entries = [e for e in named(client.status()) if e.get("name") == args.name
                   and (args.owner is None or e.get("owner") == args.owner)]
    if not entries:
        of = "" if args.owner is None else f" owned by {args.owner!r}"
        raise CliError(f"no durable subscription named {args.name!r}{of} at {args.broker} "
                       "(tidings durable list shows them)", EXIT_INPUT)
    if len(entries) > 1:
        owners = ", ".join(sorted(str(e.get("owner")) for e in entries))
        raise CliError(f"durable subscription {args.name!r} exists for several services ({owners}): "
                       "say which with --owner", EXIT_INPUT)
    entry = entries[0]
    if entry.get("connected"):
        raise CliError(f"durable subscription {args.name!r} is in use by a connection: stop its query or "
                       "subscriber first", EXIT_INPUT)
    owner = str(entry["owner"])
    as_owner = argparse.Namespace(**{**vars(args), "service": owner})  # the broker keys it by its owner's service
    with connect(as_owner, follow_advice=False) as client:
        sub = client.subscribe(str(entry["pattern"]), filter=entry.get("filter") or None, durable=args.name)
        sub.close(forget=True)
        deadline = time.monotonic() + FORGET_S_MAX
        while _still_there(client.status(), owner, args.name):
            if time.monotonic() > deadline:
                raise CliError(f"durable subscription {args.name!r} of {owner!r} is still there after "
                               f"{FORGET_S_MAX:.0f} s: with --credential, connect as {owner!r}'s identity",
                               EXIT_BROKER)
            time.sleep(POLL_S)
    print(f"forgot durable subscription {args.name!r} of {owner!r} (pattern {entry['pattern']})")
    return 0


def _still_there(status: dict[str, Any], owner: str, name: str) -> bool:
    return any(e.get("owner") == owner and e.get("name") == name for e in named(status))
