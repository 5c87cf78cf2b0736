"""`make run`'s summary: latency with its unit, and the JVM's warnings kept out of it."""

import subprocess
import sys

from tidings.cli.demo import child_stderr_to, format_latency


def test_latency_is_printed_with_its_unit():
    assert format_latency({"p50": 1.5, "p99": 12.25}) == "p50 1.500 ms, p99 12.250 ms"
    assert format_latency(None) == "no deliveries measured"


def test_a_child_started_inside_writes_its_stderr_to_the_log_for_its_whole_life(tmp_path, capfd):
    log = tmp_path / "spark.log"
    with child_stderr_to(log):
        child = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stderr.write('WARN early\\n'); "
                                  "sys.stderr.flush(); time.sleep(0.3); sys.stderr.write('WARN late\\n')"])
    sys.stderr.write("ours\n")
    assert child.wait(10) == 0
    err = capfd.readouterr().err
    assert "ours" in err and "WARN" not in err
    assert log.read_text() == "WARN early\nWARN late\n"
