"""The README's MQTT example, run as written (ports and data directories swapped for free ones):
two brokers of one overlay, `mosquitto_sub` on one receiving `mosquitto_pub` from the other, and the
line the README says it prints."""

import json
import re
import select
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .mqtt_io import mosquitto

pytestmark = pytest.mark.integration
README = Path(__file__).resolve().parents[2] / "README.md"


def example() -> list[str]:
    section = README.read_text().split("## MQTT clients", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_the_readme_example_runs(tmp_path):
    mosquitto("mosquitto_sub")
    lines = example()
    text = "\n".join(lines)
    ports = sorted(set(re.findall(r"127\.0\.0\.1:(\d+)|-p (\d+)", text)) - {("", "")})
    wanted = sorted({int(a or b) for a, b in ports})
    swap = dict(zip(wanted, free_ports(len(wanted)), strict=True))
    expected = re.search(r"# mosquitto_sub prints: (.*)$", text, re.M).group(1).strip()
    procs: list[subprocess.Popen[str]] = []
    try:
        sub = pub = None
        for written in lines:
            line = written
            for old, new in swap.items():
                line = re.sub(rf"\b{old}\b", str(new), line)
            argv = [a for a in shlex.split(line.replace("./data/", f"{tmp_path}/"), comments=True) if a != "&"]
            if argv[0] == "tidings":
                proc = subprocess.Popen([sys.executable, "-m", "tidings.cli.main", *argv[1:], "--log-level", "warning"],
                                        stdout=subprocess.PIPE, text=True)
                procs.append(proc)
                ready, _, _ = select.select([proc.stdout], [], [], 30)
                assert ready and "mqtt" in json.loads(proc.stdout.readline())
            elif argv[0] == "mosquitto_sub":
                sub = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
                procs.append(sub)
            else:
                assert argv[0] == "mosquitto_pub"
                pub = argv
        assert sub is not None and pub is not None
        deadline = time.monotonic() + 30
        got = ""
        while not got and time.monotonic() < deadline:  # until the subscription joined its tree (a second or so)
            assert subprocess.run(pub, capture_output=True, timeout=15, check=False).returncode == 0
            ready, _, _ = select.select([sub.stdout], [], [], 0.5)
            if ready:
                got = sub.stdout.readline().strip()
        assert got == expected
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
