import socket

import pytest

from tidings.testing import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path / "broker") as proc:
        yield proc


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the tests of a module that only need an address to talk to (input refused
    before anything is published or subscribed), instead of a process started and stopped for each."""
    with BrokerProcess(tmp_path_factory.mktemp("shared") / "broker") as proc:
        yield proc


@pytest.fixture
def free_port():
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
