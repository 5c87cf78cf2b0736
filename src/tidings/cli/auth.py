"""`tidings auth add NAME`: create an identity in an auth file and print its credential once;
`tidings auth remove NAME`: remove an identity and the rules naming it.

The credential (NAME:SECRET) is printed on stdout as one JSON line and stored nowhere: the file
keeps only a salted scrypt verifier (aio/auth_file.py). Give it to the client as `--credential`
or in $TIDINGS_CREDENTIAL; give the file to brokers as `--auth FILE`, and send them SIGHUP after
editing it. The broker-side flags (`--auth`, `--allow-anonymous`) and the loopback rule are here
too, so the broker command only calls `broker_auth`.
"""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import fields
from pathlib import Path
from typing import Any

from tidings.cli.common import EXIT_INPUT, CliError, emit
from tidings.core.auth.policy import Limits
from tidings.core.errors import TidingsError

DEFAULT_AUTH_FILE = "tidings-auth.toml"
LIMIT_KEYS = tuple(f.name for f in fields(Limits))


def add_parser(sub: Any) -> None:
    au = sub.add_parser("auth", help="manage identities in an auth file (add NAME / remove NAME)")
    asub = au.add_subparsers(dest="action", required=True)
    add = asub.add_parser("add", help="create an identity and print its credential once")
    add.add_argument("name", help="the identity: the service stamped on the events it publishes (1 to 64 ASCII "
                     "letters, digits, '_', '.' or '-'; not one that reads as another of the file's, "
                     "ignoring case and look-alikes, nor as 'anonymous')")
    add.add_argument("--file", default=DEFAULT_AUTH_FILE, help="the auth file (default %(default)s; "
                     "created mode 0600 with a fresh cluster secret when missing)")
    add.add_argument("--instance", action="append", default=[], metavar="NAME|PREFIX*",
                     help="an instance the identity may use (repeatable; default any)")
    add.add_argument("--publish", action="append", default=[], metavar="PATTERN",
                     help="allow publishing on channels matching PATTERN (repeatable)")
    add.add_argument("--subscribe", action="append", default=[], metavar="PATTERN",
                     help="allow subscribing within PATTERN (repeatable)")
    add.add_argument("--deny-publish", action="append", default=[], metavar="PATTERN",
                     help="deny publishing on channels matching PATTERN, whatever else allows it (repeatable)")
    add.add_argument("--deny-subscribe", action="append", default=[], metavar="PATTERN",
                     help="deny subscribing to patterns that share a channel with PATTERN (repeatable)")
    add.add_argument("--limit", action="append", default=[], metavar="KEY=VALUE",
                     help="one of the identity's own limits, a positive integer (repeatable): "
                          f"{', '.join(LIMIT_KEYS)} (docs/security.md)")
    add.set_defaults(func=cmd_add)
    rm = asub.add_parser("remove", help="remove an identity and the rules naming it (then SIGHUP the brokers)")
    rm.add_argument("name", help="the identity to remove")
    rm.add_argument("--file", default=DEFAULT_AUTH_FILE, help="the auth file (default %(default)s)")
    rm.set_defaults(func=cmd_remove)


def _limits(items: list[str]) -> dict[str, int]:
    limits: dict[str, int] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in LIMIT_KEYS:
            raise CliError(f"--limit expects KEY=VALUE with KEY one of {', '.join(LIMIT_KEYS)}, got {item!r}",
                           EXIT_INPUT)
        if not value.strip().isdigit() or int(value) <= 0:
            raise CliError(f"--limit {key} must be a positive integer, got {value!r}", EXIT_INPUT)
        if key in limits:
            raise CliError(f"--limit {key} is given twice", EXIT_INPUT)
        limits[key] = int(value)
    return limits


def cmd_add(args: argparse.Namespace) -> int:
    from tidings.aio.auth_file import add_identity

    limits = _limits(args.limit)
    try:
        credential = add_identity(Path(args.file), args.name, args.instance, args.publish, args.subscribe,
                                  deny_publish=tuple(args.deny_publish), deny_subscribe=tuple(args.deny_subscribe),
                                  limits=limits)
    except (TidingsError, OSError) as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    emit({"identity": args.name, "credential": str(credential), "file": args.file})
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from tidings.aio.auth_file import remove_identity

    try:
        rules = remove_identity(Path(args.file), args.name)
    except (TidingsError, OSError) as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    emit({"removed": args.name, "rules_removed": rules, "file": args.file})
    return 0


def broker_options(b: argparse.ArgumentParser) -> None:
    b.add_argument("--auth", metavar="FILE", help="identities, access rules, limits and the cluster "
                   "secret (docs/security.md); SIGHUP rereads it")
    b.add_argument("--allow-anonymous", action="store_true",
                   help="let clients in without a credential on a non-loopback address (or beside --auth)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def broker_auth(args: argparse.Namespace, host: str) -> Path | None:
    """The auth file to use, checked; refuses anonymous clients off loopback unless asked."""
    if args.auth is None:
        if not is_loopback(host) and not args.allow_anonymous:
            raise CliError(f"--listen {host} is not loopback: give --auth FILE (tidings auth add) or "
                           f"--allow-anonymous to let anyone in", EXIT_INPUT)
        return None
    from tidings.aio.auth_file import load_policy

    try:
        load_policy(Path(args.auth), args.allow_anonymous)
    except TidingsError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    return Path(args.auth)
