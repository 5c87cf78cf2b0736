"""`tidings broker`'s MQTT options as a user gives them: refused with one line and exit code 2 when
they cannot work (TLS without the broker's certificate, a port off loopback that would let anyone
in, an address that is not HOST:PORT), and the ready line naming the MQTT ports otherwise."""

import json
import select
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def broker(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(tmp_path / "b"),
                           "--listen", "127.0.0.1:0", *args], capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize(("args", "says"), [
    (["--mqtt-tls", "127.0.0.1:0"], "--mqtt-tls needs the broker's certificate"),
    (["--mqtt", "0.0.0.0:0"], "is not loopback"),
    (["--mqtt", "nowhere"], "--mqtt"),
])
def test_options_that_cannot_work_are_refused(tmp_path, args, says):
    done = broker(tmp_path, *args)
    assert done.returncode == 2 and says in done.stderr


def test_the_ready_line_names_the_mqtt_ports(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(tmp_path / "b"),
                             "--listen", "127.0.0.1:0", "--mqtt", "127.0.0.1:0", "--log-level", "warning"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], 30)
        assert readable, "no ready line within 30 s"
        ready = json.loads(proc.stdout.readline())
        assert ready["mqtt"].startswith("127.0.0.1:") and ready["mqtt_tls"] is None
    finally:
        proc.terminate()
        proc.wait(15)
