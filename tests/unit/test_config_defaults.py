"""Option defaults are written once (core/defaults.py): the machine configs BrokerConfig() builds
equal the machines' own defaults, and docs/configuration.md gives BrokerConfig's defaults."""

import re
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from tidings.core.broker.directory import DirectoryConfig
from tidings.core.config import BrokerConfig
from tidings.core.links.link import PeerConfig
from tidings.core.multicast.agent import ScribeConfig
from tidings.core.overlay.node import OverlayConfig
from tidings.core.reliability.node import ReliabilityConfig
from tidings.core.reliability.source import SourceConfig
from tidings.core.session.client_session import ClientSession
from tidings.core.units import GIB, HOUR_NS, KIB, MIB, MILLISECOND_NS, SECOND_NS

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(\w+)` \| ([^|]+?) \|", re.M)
UNITS = {"KiB": KIB, "MiB": MIB, "GiB": GIB, "ms": MILLISECOND_NS, "s": SECOND_NS, "min": 60 * SECOND_NS,
         "h": HOUR_NS, "days": 24 * HOUR_NS}
BUILT = BrokerConfig()


@pytest.mark.parametrize(("built", "own"), [
    (BUILT.scribe_config(), ScribeConfig()), (BUILT.overlay_config(), OverlayConfig()),
    (BUILT.peer_config(), PeerConfig()), (BUILT.directory_config(), DirectoryConfig()),
], ids=lambda c: type(c).__name__)
def test_the_machine_configs_the_broker_builds_have_their_own_defaults(built, own):
    assert built == own


def test_the_reliability_defaults_are_the_broker_s():
    built = BUILT.reliability_config()
    for f in fields(ReliabilityConfig):
        if f.default is not MISSING:  # a field with a default of its own
            assert getattr(built, f.name) == f.default, f.name
    source = {f.name: f.default for f in fields(SourceConfig) if f.name in ("release_hold_ns", "retransmit_wait_ns",
                                                                            "retransmit_window_bytes")}
    assert source == {name: getattr(built, name) for name in source}


def test_a_client_session_assumes_the_broker_s_frame_and_event_sizes():
    session = ClientSession("svc", "i")
    assert (session.frame_bytes_max, session.event_bytes_max) == (BUILT.frame_bytes_max, BUILT.event_bytes_max)


def value(text: str) -> int | bool:
    text = text.replace(",", "")
    if text in ("true", "false"):
        return text == "true"
    number, _, unit = text.partition(" ")
    return int(number) * UNITS[unit] if unit else int(number)


def test_configuration_md_gives_the_defaults_of_broker_config():
    documented = dict(ROW.findall((ROOT / "docs" / "configuration.md").read_text()))
    known = {f.name for f in fields(BrokerConfig)}
    assert set(documented) <= known, f"documented but not options: {set(documented) - known}"
    for key, text in documented.items():
        assert value(text) == getattr(BUILT, key), f"{key}: docs say {text}"
    assert known == set(documented), f"not documented: {known - set(documented)}"
