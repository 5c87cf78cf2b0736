"""TLS options of the `tidings` command, and `tidings tls dev-certs` (a development CA and certificate)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tidings.cli.common import EXIT_BROKER, EXIT_INPUT, CliError, emit


def add_parser(sub: Any) -> None:
    tl = sub.add_parser("tls", help="TLS helpers (dev-certs)")
    tsub = tl.add_subparsers(dest="action", required=True)
    dev = tsub.add_parser("dev-certs", help="make a development CA and a certificate for the given hosts")
    dev.add_argument("--dir", default="./tls", help="where to write ca.pem, ca.key, cert.pem, cert.key "
                     "(default %(default)s)")
    dev.add_argument("--host", action="append", default=[], metavar="NAME|IP",
                     help="a host name or IP the certificate is for (repeatable; default 127.0.0.1 and localhost)")
    dev.add_argument("--days", type=_days, default=30, help="validity in days, a positive integer "
                     "(default %(default)s)")
    dev.add_argument("--force", action="store_true", help="replace the CA and certificate already in --dir "
                     "(what the old CA signed is then no longer trusted by whoever takes the new ca.pem)")
    dev.set_defaults(func=cmd_dev_certs)


DAYS_MAX = 36_500  # openssl takes more; a development CA has no use for it


def _days(text: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= DAYS_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number of days from 1 to {DAYS_MAX}, got {text!r}")
    return int(text)


def cmd_dev_certs(args: argparse.Namespace) -> int:
    from tidings.aio.tls import make_dev_certs

    existing = [p for p in (Path(args.dir) / name for name in ("ca.pem", "ca.key", "cert.pem", "cert.key"))
                if p.exists()]
    if existing and not args.force:
        raise CliError(f"{existing[0]} exists already: give --force to replace the CA and certificate in "
                       f"{args.dir} (brokers and clients holding the old ca.pem stop trusting the new ones)",
                       EXIT_INPUT)
    if existing:
        sys.stderr.write(f"tidings: replacing the CA and certificate in {args.dir}\n")
    try:
        paths = make_dev_certs(Path(args.dir), args.host or ["127.0.0.1", "localhost"], args.days)
    except OSError as exc:
        raise CliError(f"cannot make certificates: {exc}", EXIT_BROKER) from None
    emit({k: str(v) for k, v in paths.items()})
    return 0


def broker_options(b: argparse.ArgumentParser) -> None:
    b.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this certificate (PEM; with --tls-key)")
    b.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    b.add_argument("--tls-ca", metavar="FILE", help="CA that other brokers' certificates must chain to "
                   "(default: the system's); also checks client certificates with --tls-require-client-cert")
    b.add_argument("--tls-require-client-cert", action="store_true",
                   help="refuse connections without a certificate from --tls-ca (mutual TLS between brokers)")


def broker_tls(args: argparse.Namespace) -> Any:
    from tidings.aio.tls import TlsFiles

    if args.tls_cert is None and args.tls_key is None:
        if args.tls_ca or args.tls_require_client_cert:
            raise CliError("--tls-ca and --tls-require-client-cert need --tls-cert and --tls-key", EXIT_INPUT)
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise CliError("--tls-cert and --tls-key go together", EXIT_INPUT)
    files = TlsFiles(Path(args.tls_cert), Path(args.tls_key), None if args.tls_ca is None else Path(args.tls_ca),
                     args.tls_require_client_cert)
    try:
        files.server_context()
        files.dial_context()
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot use the TLS files: {exc}", EXIT_INPUT) from None
    return files


def client_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--tls", action="store_true", help="connect with TLS (checked against the system's CAs)")
    sp.add_argument("--tls-ca", metavar="FILE", help="connect with TLS, checking the broker against this CA")


def client_tls(args: argparse.Namespace) -> Any:
    if args.tls_ca is None:
        return bool(args.tls)
    from tidings.aio.tls import client_context

    try:
        return client_context(Path(args.tls_ca))
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot use --tls-ca {args.tls_ca}: {exc}", EXIT_INPUT) from None
