"""TLS options of the `tidings` command, and `tidings tls dev-certs` (a development CA and certificate)."""

from __future__ import annotations

import argparse
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
    dev.add_argument("--days", type=int, default=30, help="validity (default %(default)s)")
    dev.set_defaults(func=cmd_dev_certs)


def cmd_dev_certs(args: argparse.Namespace) -> int:
    from tidings.aio.tls import make_dev_certs

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
