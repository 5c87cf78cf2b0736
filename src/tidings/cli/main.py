"""The `tidings` command: broker, pub, sub, status, durable and demo. Thin: it parses, calls, prints.

Exit codes: 0 success (`sub`: it reached --count, or its subscription ended), 1 an error reported
by the broker or a lost connection, 2 bad input (usage, channel, pattern, filter, attribute, start;
for `pub` from stdin: some line was refused), 3 the broker is unreachable or not a tidings broker,
4 `sub` ended at --timeout, 130 interrupted (Ctrl-C). Every error is one line on stderr saying what
is wrong.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidings.cli import auth as auth_cli
from tidings.cli import cluster as cluster_cli
from tidings.cli import directory as directory_cli
from tidings.cli import durable as durable_cli
from tidings.cli import mqtt as mqtt_cli
from tidings.cli import sim as sim_cli
from tidings.cli import tls as tls_cli
from tidings.cli import tuple_store as tuple_store_cli
from tidings.cli.common import (
    CREDENTIAL_ENV,
    EXIT_BROKER,
    EXIT_INPUT,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    CliError,
    emit,
)
from tidings.cli.status import render_status
from tidings.cli.stdin_lines import LINE_BYTES_MAX, LineTooLong, StdinLines
from tidings.client.client import Gap, parse_address
from tidings.core.channels import validate_channel
from tidings.core.config import BrokerConfig, ConfigError
from tidings.core.errors import BrokerError, BrokerUnreachable, ConnectionClosed, GapError, TidingsError
from tidings.core.event import validate_attributes
from tidings.core.filters.lexer import bare_name

DEFAULT_BROKER = os.environ.get("TIDINGS_BROKER", "127.0.0.1:7400")
DEFAULT_SERVICE = "tidings-cli"
WILDCARD_HOSTS = ("0.0.0.0", "::")

def attr_value(text: str) -> Any:
    """`--attr` values are typed: integers, floats, true/false; "quoted" or anything else is a string."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        if kind is float and not math.isfinite(value):
            return text
        return value
    return text


def parse_attrs(items: list[str]) -> dict[str, Any]:
    """KEY=VALUE items as attributes; each KEY once, and a name a filter can use as it is."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--attr expects KEY=VALUE, got {item!r}", EXIT_INPUT)
        if not bare_name(key):
            raise CliError(f"--attr name {key!r} cannot be used in a filter: a name starts with a letter or _ "
                           f"and holds letters, digits, _ and . (and is not and/or/not/in/true/false)",
                           EXIT_INPUT)
        if key in out:
            raise CliError(f"--attr {key} is given twice", EXIT_INPUT)
        out[key] = attr_value(value)
    return validate_attributes(out)


def parse_start(text: str) -> Any:
    import datetime as dt

    if text in ("now", "start"):
        return text
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--from takes now, start, a tick or an ISO-8601 time, not {text!r}",
                       EXIT_INPUT) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


# ---- commands --------------------------------------------------------------------------------------


def cmd_broker(args: argparse.Namespace) -> int:
    from tidings.aio.server import JoinFailed, run_broker

    config = BrokerConfig()
    if args.config:
        try:
            with open(args.config, "rb") as fh:
                config = BrokerConfig.from_mapping(tomllib.load(fh))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise CliError(f"cannot read config {args.config}: {exc}", EXIT_INPUT) from None
        except ConfigError as exc:
            raise CliError(f"config {args.config}: {exc}", EXIT_INPUT) from None
    try:
        host, port = parse_address(args.listen, port_min=0)
    except TidingsError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _check_overlay_options(args, host)
    auth = auth_cli.broker_auth(args, host)
    tls = tls_cli.broker_tls(args)
    mqtt = mqtt_cli.broker_mqtt(args)

    http = None
    if args.http is not None:
        try:
            http = parse_address(args.http, port_min=0)
        except TidingsError as exc:
            raise CliError(f"--http: {exc}", EXIT_INPUT) from None

    def ready(server: Any) -> None:
        emit({"listening": server.address, "pubend": server.core.pubend.pubend_id,
              "node_id": server.node_id, "data": str(server.data_dir),
              **({"http": server.http.address} if server.http is not None else {}),
              **({} if server.mqtt is None else {"mqtt": server.mqtt.address(False),
                                                 "mqtt_tls": server.mqtt.address(True)})})

    from tidings.storage import StorageError

    try:
        run_broker(Path(args.data), host, port, config, ready, join=args.join, advertise=args.advertise,
                   join_timeout_s=args.join_timeout, http=http, auth=auth,
                   allow_anonymous=args.allow_anonymous, tls=tls, drain_timeout_s=args.drain_timeout, mqtt=mqtt)
    except (OSError, StorageError) as exc:
        raise CliError(f"cannot run broker: {exc}", EXIT_BROKER) from None
    except JoinFailed as exc:
        raise CliError(str(exc), EXIT_BROKER) from None
    return 0


def _check_overlay_options(args: argparse.Namespace, host: str) -> None:
    if not args.join_timeout > 0:
        raise CliError("--join-timeout must be a positive number of seconds", EXIT_INPUT)
    if not args.drain_timeout >= 0:
        raise CliError("--drain-timeout must be 0 or a positive number of seconds", EXIT_INPUT)
    for option in ("join", "advertise"):
        value = getattr(args, option)
        if value is not None:
            try:
                parse_address(value)
            except TidingsError as exc:
                raise CliError(f"--{option}: {exc}", EXIT_INPUT) from None
    if host in WILDCARD_HOSTS and args.advertise is None:
        if args.join is not None:
            raise CliError(f"--listen {args.listen} is not an address other brokers can reach; add "
                           f"--advertise HOST:PORT", EXIT_INPUT)
        logging.getLogger("tidings.broker").warning(
            "listening on %s without --advertise: brokers that join this one will not reach it", args.listen)


def _connect(args: argparse.Namespace, follow_advice: bool = True, failover: Sequence[str] = ()) -> Any:
    """A client of --broker; `status` asks a given broker, so it does not follow route advice."""
    from tidings import sync

    if not args.connect_timeout > 0:
        raise CliError("--connect-timeout must be a positive number of seconds", EXIT_INPUT)
    client = sync.connect(args.broker, service=args.service or DEFAULT_SERVICE, instance=args.instance,
                          timeout=args.connect_timeout, credential=args.credential, tls=tls_cli.client_tls(args),
                          follow_advice=follow_advice, failover=failover)
    client.on_move = _say_move
    return client


def _note_service(args: argparse.Namespace) -> None:
    """Once authenticated, the broker stamps the identity on every event: say so when --service
    asked for another source, rather than let it be overridden silently."""
    identity = (args.credential or "").partition(":")[0]
    if args.service is not None and args.credential and args.service != identity:
        sys.stderr.write(f"tidings: note: the events' source is the authenticated identity {identity}, not "
                         f"--service {args.service}: the broker stamps the identity it authenticated\n")


def _say_move(old: str, new: str, why: str) -> None:
    """One line on stderr each time the client goes on at another broker."""
    sys.stderr.write(f"tidings: moved from broker {old} to {new} ({why})\n")
    sys.stderr.flush()


def cmd_pub(args: argparse.Namespace) -> int:
    validate_channel(args.channel)
    attrs = parse_attrs(args.attr)
    if (args.producer is None) != (args.seq is None):
        raise CliError("--producer and --seq go together (idempotent publish)", EXIT_INPUT)
    # idempotent publish: a route-advice move would take the repeats to another broker's window
    with _connect(args, follow_advice=args.producer is None) as client:
        _note_service(args)
        if args.payload is not None:
            res = client.publish(args.channel, args.payload, attrs, producer=args.producer, seq=args.seq)
            emit(_ack_line(res))
            return 0
        lines = StdinLines(sys.stdin.fileno())
        code = 0
        while batch := lines.batch():
            code = _publish_lines(client, args.channel, attrs, batch, args.producer, args.seq) or code
    return code


def _ack_line(res: Any) -> dict[str, Any]:
    return {"pubend": res.pubend, "tick": res.tick, **({"duplicate": True} if res.duplicate else {})}


def _publish_lines(client: Any, channel: str, attrs: dict[str, Any],
                   batch: list[tuple[int, bytes | LineTooLong]], producer: str | None = None,
                   seq: int | None = None) -> int:
    """Publish numbered stdin lines, printing an ack per line, in order; a line that is refused is
    reported (one stderr line) without holding up the others. With `producer`, line n (from 1)
    has sequence `seq + n - 1`. Returns 0, or the exit code of the first refusal."""
    sendable = [(n, line) for n, line in batch if isinstance(line, bytes)]
    try:
        if producer is None:
            results = client.publish_many([(channel, line, attrs) for _, line in sendable])
        else:
            assert seq is not None
            results = client.publish_many([(channel, line, attrs, seq + n - 1) for n, line in sendable],
                                          producer=producer)
    except BrokerError as exc:  # some were refused by the broker; the others are logged
        results = exc.results  # type: ignore[attr-defined]
    except (TidingsError, ValueError):  # one line is refused before sending: nothing went out
        if len(sendable) == 1:
            results = [sys.exc_info()[1]]
        else:
            codes = [_publish_lines(client, channel, attrs, [item], producer, seq) for item in sendable]
            return next((c for c in codes if c), 0)
    outcome = dict(zip([n for n, _ in sendable], results, strict=True))
    code = 0
    for n, line in batch:
        res = outcome.get(n)
        if isinstance(line, LineTooLong):
            _line_error(n, f"longer than {LINE_BYTES_MAX} bytes (no event can be that large)")
            code = code or EXIT_INPUT
        elif isinstance(res, BaseException):
            _line_error(n, f"{res} ({getattr(res, 'code', 'error')})")
            code = code or (EXIT_BROKER if isinstance(res, BrokerError) else EXIT_INPUT)
        else:
            assert res is not None
            emit(_ack_line(res))
    return code


def _line_error(number: int, message: str) -> None:
    sys.stderr.write(f"tidings: error: stdin line {number}: {message}\n")
    sys.stderr.flush()


def cmd_sub(args: argparse.Namespace) -> int:
    start = parse_start(args.from_)
    if args.count is not None and args.count < 1:
        raise CliError("--count must be at least 1", EXIT_INPUT)
    if args.timeout is not None and not args.timeout > 0:
        raise CliError("--timeout must be a positive number of seconds", EXIT_INPUT)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    count = 0
    on_gap = "event" if args.on_gap == "line" else "raise"
    if args.token and args.durable:
        raise CliError("--token and --durable are two kinds of durable subscription: give one", EXIT_INPUT)
    token_file = Path(args.token) if args.token else None
    token = _read_token(token_file)
    durable: dict[str, Any] = ({"durable": True, "token": token} if token_file is not None
                               else {"durable": args.durable} if args.durable else {})
    failover = _failover(args.failover, args)
    with _connect(args, failover=failover) as client, client.subscribe(args.pattern, filter=args.filter, start=start,
                                                    on_gap=on_gap, order=args.order, **durable) as sub:
        _say_ready(args, sub.position)
        while args.count is None or count < args.count:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return EXIT_TIMEOUT
            try:
                item = sub.get(remaining)
            except TimeoutError:
                return EXIT_TIMEOUT
            if item is None:
                break
            if isinstance(item, Gap):
                emit({"gap": {"pubend": item.pubend, "after": item.after, "through": item.through}})
            else:
                emit(item.to_json())
                count += 1
            if token_file is not None:  # after the line: a kill in between prints it again, never loses it
                _write_token(token_file, sub.token)
            elif args.durable:  # the broker keeps the position: what is printed is consumed
                sub.ack()
    return 0


def _failover(option: str | None, args: argparse.Namespace) -> list[str]:
    """The --failover addresses, checked: a subscription held at one broker (--durable NAME) cannot
    go on at another, nor can a total-order one (it starts from now, so it would skip events)."""
    addresses = [a.strip() for a in (option or "").split(",") if a.strip()]
    if addresses and args.durable:
        raise CliError("--failover cannot take a --durable NAME to another broker (its position is kept by "
                       "the broker that holds the name): use --token FILE", EXIT_INPUT)
    if addresses and args.order == "total":
        raise CliError("--failover cannot resume a total-order subscription (it starts from now at another "
                       "broker and would skip what was published meanwhile)", EXIT_INPUT)
    for address in addresses:
        try:
            parse_address(address)
        except TidingsError as exc:
            raise CliError(f"--failover: {exc}", EXIT_INPUT) from None
    return addresses


def _read_token(path: Path | None) -> str | None:
    if path is None or not path.exists():
        return None
    text = path.read_text().strip()
    return text or None


def _write_token(path: Path, token: str) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(token + "\n")
    temp.replace(path)


def _say_ready(args: argparse.Namespace, position: int | None) -> None:
    """Once the broker confirmed the subscription: a line on stderr, and --ready-file if asked for,
    so that a script can publish only once `sub` will see it."""
    sys.stderr.write(f"tidings: subscribed to {args.pattern} at {args.broker} (position {position})\n")
    sys.stderr.flush()
    if args.ready_file:
        path = Path(args.ready_file)
        temp = path.with_name(path.name + ".tmp")
        temp.write_text(json.dumps({"pattern": args.pattern, "broker": args.broker, "position": position}) + "\n")
        temp.replace(path)


def cmd_status(args: argparse.Namespace) -> int:
    with _connect(args, follow_advice=False) as client:
        status = client.status()
    if args.json:
        emit(status)
    else:
        sys.stdout.write(render_status(status))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tidings.cli.demo import run_demo

    for option in ("hosts", "rounds", "brokers"):
        if getattr(args, option) < 1:
            raise CliError(f"--{option} must be at least 1", EXIT_INPUT)
    return run_demo(Path(args.data), hosts=args.hosts, rounds=args.rounds, spark=not args.no_spark,
                    brokers=args.brokers)


# ---- parser ----------------------------------------------------------------------------------------


def _client_options(sp: argparse.ArgumentParser, publishes: bool = False) -> None:
    sp.add_argument("--broker", default=DEFAULT_BROKER, help="HOST:PORT (default %(default)s, or $TIDINGS_BROKER)")
    what = "stamped on published events as their source" if publishes else "this client gives the broker"
    sp.add_argument("--service", default=None, help=f"service name {what} (default {DEFAULT_SERVICE}; with "
                    f"--credential the broker stamps the identity instead)")
    sp.add_argument("--instance", default=None, help=f"instance name {what} (default HOSTNAME-PID)")
    sp.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                    help="give up connecting after this long (default %(default)s)")
    sp.add_argument("--credential", metavar="NAME:SECRET", default=os.environ.get(CREDENTIAL_ENV),
                    help="authenticate as this identity (default $TIDINGS_CREDENTIAL)")
    tls_cli.client_options(sp)


def _add_pub_and_sub(sub: Any) -> None:
    pb = sub.add_parser("pub", help="publish one event, or one per stdin line")
    _client_options(pb, publishes=True)
    pb.add_argument("channel", help="the channel, e.g. nodes/host1/load: /-separated segments (empty ones "
                    "allowed), no + or #, at most 1024 bytes")
    pb.add_argument("payload", nargs="?", help="payload text; without it, each stdin line is an event, "
                    "published as it arrives")
    pb.add_argument("--attr", action="append", default=[], metavar="KEY=VALUE",
                    help="attribute; numbers and true/false are typed, \"quoted\" stays a string")
    pb.add_argument("--producer", metavar="ID", help="idempotent publish: the producer id (with --seq); the "
                    "broker logs each (producer, seq) once within its dedup window and answers a repeat "
                    "with the original tick and \"duplicate\": true")
    pb.add_argument("--seq", type=int, metavar="N", help="the producer sequence of the event, or of the first "
                    "stdin line (the next lines count up from it)")
    pb.set_defaults(func=cmd_pub)

    sb = sub.add_parser("sub", help="subscribe and print one JSON line per event")
    _client_options(sb)
    sb.add_argument("pattern", help="channel pattern: + matches one segment, # (last) any number, "
                    "e.g. nodes/+/load, nodes/#")
    sb.add_argument("--filter", help="content filter, e.g. 'load > 2.5 and site = \"eu\"'")
    sb.add_argument("--from", dest="from_", default="now", metavar="START",
                    help="now (default), start (the oldest retained event), a TICK or an ISO-8601 time")
    sb.add_argument("--order", choices=["publisher", "total"], default="publisher",
                    help="publisher (default): each publisher's events in order; total: one interleaving "
                         "shared by every total-order subscriber of the tree (starts now)")
    sb.add_argument("--token", metavar="FILE",
                    help="durable: resume from the checkpoint token in FILE if it exists (on any broker), and "
                         "rewrite FILE atomically after each line printed (see docs/durable.md)")
    sb.add_argument("--durable", metavar="NAME",
                    help="durable, with the position kept by the broker under NAME (for this --service): "
                         "run again with the same NAME, pattern and filter on the same broker to go on after "
                         "the last line printed (see docs/durable.md)")
    sb.add_argument("--failover", metavar="HOST:PORT,...",
                    help="when the connection to --broker is lost (the broker killed or silent), resume on the "
                         "first of these brokers (or --broker again) that answers within 60 s, after the last "
                         "event printed (from the token with --token); not with --durable or --order total")
    sb.add_argument("--count", type=int, metavar="N", help="exit (code 0) after N events")
    sb.add_argument("--timeout", type=float, metavar="SECONDS", help="exit (code 4) after SECONDS")
    sb.add_argument("--ready-file", metavar="PATH",
                    help="write PATH (JSON) once the broker confirmed the subscription")
    sb.add_argument("--on-gap", choices=["line", "error"], default="line",
                    help="print a gap line (default) or fail when requested events were released "
                         "before they were read")
    sb.set_defaults(func=cmd_sub)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tidings", description="tidings publish/subscribe broker and tools")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run a broker in the foreground (SIGINT/SIGTERM stop it)")
    b.add_argument("--data", required=True, help="directory for the broker's log and identity")
    b.add_argument("--listen", default="127.0.0.1:7400", help="HOST:PORT to listen on (default %(default)s)")
    b.add_argument("--join", metavar="HOST:PORT", help="join the overlay of the broker at this address "
                   "(without it, this broker starts a new overlay)")
    b.add_argument("--join-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="give up (exit 1) when not in the overlay after this long (default %(default)s)")
    b.add_argument("--drain-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="on SIGTERM, advise clients to move to a neighbour and wait at most this long for "
                        "them to go before stopping; 0 stops at once, as SIGINT does (default %(default)s)")
    b.add_argument("--advertise", metavar="HOST:PORT",
                   help="the address other brokers reach this one at (default: the bound address)")
    b.add_argument("--http", metavar="HOST:PORT", help="serve /metrics (Prometheus) and /status (JSON) over "
                   "HTTP here (port 0: a free one, given in the ready line); off by default")
    b.add_argument("--config", help="TOML file setting limits and timers (see docs/configuration.md)")
    b.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="the least severe log lines the broker writes to stderr (default %(default)s)")
    auth_cli.broker_options(b)
    tls_cli.broker_options(b)
    mqtt_cli.broker_options(b)
    b.set_defaults(func=cmd_broker)

    _add_pub_and_sub(sub)

    cluster_cli.add_parser(sub)
    auth_cli.add_parser(sub)
    tls_cli.add_parser(sub)
    sim_cli.add_parser(sub)
    tuple_store_cli.add_parser(sub)
    directory_cli.add_parser(sub)

    st = sub.add_parser("status", help="print the broker's counters, overlay, peers and trees")
    _client_options(st)
    st.add_argument("--json", action="store_true", help="one JSON object")
    st.set_defaults(func=cmd_status)
    durable_cli.add_parser(sub, _client_options, _connect)

    dm = sub.add_parser("demo", help="run the PLDB pipeline on brokers in one overlay (--brokers, default 3): "
                        "monitors, subscribers, the tuple store, the Spark health stream and plots; print a summary")
    dm.add_argument("--data", default="./data", help="directory for the demo's brokers, tuple store, Spark "
                    "checkpoint and plots, emptied of the last run's first (default %(default)s)")
    dm.add_argument("--hosts", type=int, default=200, help="monitors, one per simulated host (default %(default)s)")
    dm.add_argument("--rounds", type=int, default=40, help="reports per host and metric, one every 250 ms "
                    "(default %(default)s)")
    dm.add_argument("--brokers", type=int, default=3, help="brokers in the overlay (default %(default)s)")
    dm.add_argument("--no-spark", action="store_true", help="skip the Spark steps (the health stream and the plots)")
    dm.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        code = exc.exit_code
        message = str(exc)
    except BrokerUnreachable as exc:  # NotABroker too
        code, message = EXIT_UNREACHABLE, str(exc)
    except ConnectionClosed as exc:
        code, message = EXIT_BROKER, str(exc)
    except (BrokerError, GapError) as exc:
        code, message = EXIT_BROKER, f"{exc} ({exc.code})"
    except TidingsError as exc:
        code, message = EXIT_INPUT, f"{exc} ({exc.code})"
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    sys.stderr.write(f"tidings: error: {message}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
