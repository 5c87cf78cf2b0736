"""`tidings auth add NAME`: create an identity in an auth file and print its credential once.

The credential (NAME:SECRET) is printed on stdout as one JSON line and stored nowhere: the file
keeps only a salted scrypt verifier (aio/auth_file.py). Give it to the client as `--credential`
or in $TIDINGS_CREDENTIAL; give the file to brokers as `--auth FILE`, and send them SIGHUP after
editing it. The broker-side flags (`--auth`, `--allow-anonymous`) and the loopback rule are here
too, so the broker command only calls `broker_auth`.
"""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path
from typing import Any

from tidings.cli.common import EXIT_INPUT, CliError, emit
from tidings.core.errors import TidingsError

DEFAULT_AUTH_FILE = "tidings-auth.toml"


def add_parser(sub: Any) -> None:
    au = sub.add_parser("auth", help="manage identities in an auth file (add NAME)")
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
    add.set_defaults(func=cmd_add)


def cmd_add(args: argparse.Namespace) -> int:
    from tidings.aio.auth_file import add_identity

    try:
        credential = add_identity(Path(args.file), args.name, args.instance, args.publish, args.subscribe)
    except (TidingsError, OSError) as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    emit({"identity": args.name, "credential": str(credential), "file": args.file})
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
