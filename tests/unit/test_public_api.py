"""What a Python user sees of tidings: a clear, exported error hierarchy and a useful dir()."""

import os
import threading

import pytest

import tidings
from tidings.cli import stdin_lines
from tidings.core.filters.lexer import bare_name
from tidings.core.session.client_session import ClientSession


def test_every_error_is_exported_and_in_one_hierarchy():
    for name in ("TidingsError", "ChannelError", "FilterError", "AttributesError", "EventError", "StartError",
                 "AddressError", "ConnectionClosed", "BrokerUnreachable", "NotABroker", "BrokerError",
                 "GapError", "ProtocolError", "BrokerNotProven"):
        cls = getattr(tidings, name)
        assert issubclass(cls, tidings.TidingsError) and name in dir(tidings)
    for name in ("ChannelError", "FilterError", "AttributesError", "EventError", "StartError", "AddressError"):
        assert issubclass(getattr(tidings, name), ValueError)
    assert issubclass(tidings.NotABroker, tidings.BrokerUnreachable)
    assert issubclass(tidings.BrokerUnreachable, tidings.ConnectionClosed)
    assert issubclass(tidings.BrokerNotProven, tidings.ConnectionClosed)
    assert not issubclass(tidings.BrokerNotProven, tidings.BrokerUnreachable)  # it answered, as a broker
    assert not hasattr(tidings, "AttributeError_")
    with pytest.raises(AttributeError):
        tidings.NoSuchThing  # noqa: B018


def test_dir_shows_the_public_names_and_not_the_helpers():
    names = dir(tidings)
    assert {"Client", "Event", "BrokerConfig", "Gap", "PublishResult", "TidingsError"} <= set(names)
    assert "importlib" not in names and "Any" not in names and "_EXPORTS" not in names


def test_bad_events_and_starts_raise_their_own_errors():
    session = ClientSession("test", "unit")
    with pytest.raises(tidings.EventError, match="payload must be bytes or str"):
        session.check_event("a", 42)
    with pytest.raises(tidings.EventError, match="exceeds event_bytes_max") as err:
        session.check_event("a", b"x" * (session.event_bytes_max + 1))
    assert err.value.code == "event-too-large"
    with pytest.raises(tidings.AttributesError) as err:
        session.check_event("a", b"", {"": 1})
    assert err.value.code == "bad-attributes"
    with pytest.raises(tidings.StartError):
        session.subscribe("a", None, -1, None)
    with pytest.raises(tidings.AddressError):
        tidings.sync.connect("no-port")


@pytest.mark.parametrize(("name", "ok"), [
    ("load", True), ("cpu.load_1", True), ("_x", True), ("Site2", True),
    ("", False), ("a b", False), ("1a", False), ("a-b", False), ("and", False), ("TRUE", False), (".a", False),
])
def test_bare_names_are_those_a_filter_can_use_as_they_are(name, ok):
    assert bare_name(name) is ok


def test_stdin_lines_batches_what_is_waiting_and_skips_a_line_too_long(monkeypatch):
    monkeypatch.setattr(stdin_lines, "LINE_BYTES_MAX", 10)
    monkeypatch.setattr(stdin_lines, "READ_BYTES_MAX", 4)  # lines split across reads
    read, write = os.pipe()
    lines = stdin_lines.StdinLines(read)
    os.write(write, b"one\r\n")
    assert lines.batch() == [(1, b"one")]
    os.write(write, b"two\n" + b"z" * 25 + b"\nthree\n")
    got = []
    while len(got) < 3:
        got += lines.batch()
    assert got == [(2, b"two"), (3, stdin_lines.TOO_LONG), (4, b"three")]
    closer = threading.Timer(0.05, lambda: (os.write(write, b"tail"), os.close(write)))
    closer.start()
    got = []
    while batch := lines.batch():
        got += batch
    assert got == [(5, b"tail")] and lines.batch() == []
    os.close(read)
