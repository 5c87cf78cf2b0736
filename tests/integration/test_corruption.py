"""Bytes on disk that a crash cannot explain: a clear error to the reader, a broker that serves on."""

import pytest

from tidings import BrokerError, sync
from tidings.testing import BrokerProcess

pytestmark = pytest.mark.integration


def test_a_corrupt_closed_segment_fails_its_readers_only(tmp_path):
    broker = BrokerProcess(tmp_path / "b", {"segment_bytes_max": 2048}).start()
    try:
        with sync.connect(broker.address) as c:
            for k in range(10):
                c.publish_many([("c/x", b"payload-%d-%d" % (k, i), {"i": i}) for i in range(20)])
        broker.stop()
        oldest = sorted((tmp_path / "b" / "log").glob("*.seg"))[0]
        data = bytearray(oldest.read_bytes())
        data[len(data) // 2] ^= 0xFF  # flip a bit in the middle of a closed segment
        oldest.write_bytes(bytes(data))
        broker.start()
        with sync.connect(broker.address) as c:
            with pytest.raises(BrokerError) as info:
                list(c.read("c/#", after=0))
            assert info.value.code == "log-unreadable"
            with pytest.raises(BrokerError) as info:  # a bulk read (a Spark task's) checks every record too
                list(c.read_records("c/#", after=0, end=int(c.status()["last_tick"])))
            assert info.value.code == "log-unreadable"
            res = c.publish("c/x", b"still serving")
            got = list(c.read("c/#", after=res.tick - 1))
            assert [e.payload for e in got] == [b"still serving"]
    finally:
        broker.stop()
