"""`tidings broker`'s MQTT options (docs/mqtt.md): the listeners and the password rule."""

from __future__ import annotations

import argparse
from typing import Any

from tidings.cli.auth import is_loopback
from tidings.cli.common import EXIT_INPUT, CliError
from tidings.client.client import parse_address
from tidings.core.errors import TidingsError


def broker_options(b: argparse.ArgumentParser) -> None:
    b.add_argument("--mqtt", action="append", default=[], metavar="HOST:PORT",
                   help="serve MQTT 3.1.1 and 5.0 clients here (1883 by convention; port 0: a free one, given in "
                        "the ready line); may be repeated; off by default")
    b.add_argument("--mqtt-tls", action="append", default=[], metavar="HOST:PORT",
                   help="serve MQTT over TLS here with the broker's certificate (--tls-cert, --tls-key; 8883 by "
                        "convention)")
    b.add_argument("--allow-plain-password", action="store_true",
                   help="accept MQTT passwords over plain TCP from other hosts (by default only over TLS or "
                        "from loopback)")


def broker_mqtt(args: argparse.Namespace) -> Any:
    """The MQTT listeners asked for (aio/mqtt.py `MqttOptions`), checked; None when there are none."""
    if not args.mqtt and not args.mqtt_tls:
        return None
    from tidings.aio.mqtt import MqttListen, MqttOptions
    from tidings.core.mqtt.bridge import MqttSettings

    if args.mqtt_tls and args.tls_cert is None:
        raise CliError("--mqtt-tls needs the broker's certificate: --tls-cert and --tls-key", EXIT_INPUT)
    listens = []
    for option, tls in (("mqtt", False), ("mqtt_tls", True)):
        for text in getattr(args, option):
            try:
                host, port = parse_address(text, port_min=0)
            except TidingsError as exc:
                raise CliError(f"--{option.replace('_', '-')}: {exc}", EXIT_INPUT) from None
            if args.auth is None and not is_loopback(host) and not args.allow_anonymous:
                raise CliError(f"--{option.replace('_', '-')} {host} is not loopback: give --auth FILE or "
                               f"--allow-anonymous to let anyone in", EXIT_INPUT)
            listens.append(MqttListen(host, port, tls))
    return MqttOptions(tuple(listens), MqttSettings(allow_plain_password=args.allow_plain_password))
