import pytest

from tidings.testing import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path / "broker") as proc:
        yield proc
