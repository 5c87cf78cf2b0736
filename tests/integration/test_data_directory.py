"""One broker per data directory: a second broker on a directory in use is refused at once, with
one clear line and exit code 1, while the first goes on acknowledging; nothing acknowledged is lost,
and the directory opens again after the first broker stops, even after kill -9."""

import subprocess
import sys
import time

import pytest

from tidings.storage import DataDirectoryLock, DataDirectoryLocked
from tidings.storage.lock import holder
from tidings.testing import BrokerProcess

from .publisher import Publisher, assert_no_acked_event_lost

pytestmark = pytest.mark.integration


def second_broker(data):
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(data),
                           "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=60, check=False)


def test_a_second_broker_on_the_same_data_is_refused_under_publishing(tmp_path):
    data = tmp_path / "broker"
    first = BrokerProcess(data).start()
    publisher = Publisher(first.address)
    try:
        publisher.start()
        publisher.wait_acks(100)
        for _ in range(3):
            started = time.monotonic()
            out = second_broker(data)
            assert time.monotonic() - started < 10
            assert out.returncode == 1 and out.stdout == ""
            assert out.stderr == (f"tidings: error: cannot run broker: data directory {data} is in use by "
                                  f"another broker (pid {first.pid}); stop that broker or choose another --data\n")
            publisher.wait_acks(50)
        assert holder(data) == first.pid
        publisher.stop()
        acked, read = assert_no_acked_event_lost(publisher, first.address)
        assert read == acked  # one publisher, no failure: exactly the acknowledged events
        assert publisher.failures == 0
    finally:
        publisher.stop()
        first.stop()
    assert holder(data) is None
    again = BrokerProcess(data).start()  # the directory opens cleanly once the first one is gone
    try:
        assert again.pubend == first.pubend
        assert_no_acked_event_lost(publisher, again.address)
        again.kill()  # kill -9 leaves no stale lock: the kernel drops it with the process
        assert holder(data) is None
        with BrokerProcess(data) as third:
            assert_no_acked_event_lost(publisher, third.address)
    finally:
        again.stop()


def test_the_lock_in_process(tmp_path):
    lock = DataDirectoryLock.acquire(tmp_path / "d")
    with pytest.raises(DataDirectoryLocked) as err:
        DataDirectoryLock.acquire(tmp_path / "d")  # a second open file description conflicts too
    assert err.value.code == "data-directory-locked" and "in use by another broker" in str(err.value)
    lock.release()
    lock.release()  # idempotent
    assert holder(tmp_path / "d") is None and holder(tmp_path / "never") is None
    with DataDirectoryLock.acquire(tmp_path / "d"):
        assert (tmp_path / "d" / "lock").read_text().strip().isdigit()
