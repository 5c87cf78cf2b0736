"""Broker configuration: every limit and timer, named with its unit, with documented defaults.

`BrokerConfig.from_mapping` takes the parsed TOML of `tidings broker --config FILE` (flat keys, or a
`[broker]` table) and rejects unknown keys and wrong types with a message naming the key, so a typo
never silently leaves a default in force. docs/configuration.md lists every option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tidings.core.errors import TidingsError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
SECOND_NS = 1_000_000_000


class ConfigError(TidingsError, ValueError):
    code = "bad-config"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    # wire
    frame_bytes_max: int = 8 * MIB
    event_bytes_max: int = 1 * MIB
    handshake_timeout_ns: int = 5 * SECOND_NS
    # per-connection output: past this many queued bytes a connection counts as slow and its
    # subscriptions switch from live delivery to reading the log
    send_queue_bytes_max: int = 4 * MIB
    subscriptions_per_connection_max: int = 1024
    connections_max: int = 10_000
    # events accepted but not yet synced: past this, publishers are not read until the disk catches up
    pending_sync_bytes_max: int = 64 * MIB
    # reading the log for catching-up subscriptions
    log_read_bytes_max: int = 1 * MIB
    # pubend log
    segment_bytes_max: int = 64 * MIB
    retention_bytes_max: int = 10 * GIB
    retention_age_ns: int = 7 * 24 * 3600 * SECOND_NS
    retention_check_interval_ns: int = 60 * SECOND_NS

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> BrokerConfig:
        if "broker" in data and isinstance(data["broker"], Mapping):
            data = data["broker"]
        known = {f.name: f for f in fields(cls)}
        values: dict[str, int] = {}
        for key, value in data.items():
            if key not in known:
                raise ConfigError(f"unknown configuration key {key!r}; known keys: {', '.join(sorted(known))}")
            if type(value) is not int or value <= 0:
                raise ConfigError(f"configuration key {key!r} must be a positive integer, got {value!r}")
            values[key] = value
        cfg = cls(**values)
        if cfg.event_bytes_max + 4 * KIB > cfg.frame_bytes_max:
            raise ConfigError("frame_bytes_max must exceed event_bytes_max by at least 4 KiB")
        return cfg
