"""bench/catchup_bench.py in a small configuration, tidings alone (--no-jetstream): a durable
subscriber catches up every event from the other broker's log (the records checked by the compiled
check or in Python: TIDINGS_NATIVE_RECORDS), and the result says each broker's CPU per event caught
up; with --profile, py-spy's folded samples of the subscriber's broker come with it (when
bench/setup.sh's py-spy is there)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench"
PY_SPY = Path(os.environ.get("TIDINGS_BENCH_DIR", "/tmp/tidings-bench")) / "venv-peers" / "bin" / "py-spy"


def catchup(tmp_path: Path, *extra: str, native: bool = True, events: int = 20000) -> dict:
    out = tmp_path / "results.jsonl"
    proc = subprocess.run([sys.executable, str(BENCH / "catchup_bench.py"), "--events", str(events), "--rounds", "1",
                           "--limit-s", "60", "--no-jetstream", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=240, check=False,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
                               "TIDINGS_NATIVE_RECORDS": "1" if native else "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = [json.loads(line) for line in out.read_text().splitlines()]  # no JetStream lines
    assert result["broker"] == "tidings" and result["received"] == result["events"] == events
    assert set(result["us_per_event"]) == {"origin", "home"}
    assert result["us_per_event"]["home"] == round(result["cpu_s"]["home"] * 1e6 / events, 2)
    assert result["counters"]["records_read"] >= events  # every event came from the origin's log
    return result


@pytest.mark.parametrize("native", [True, False], ids=["records checked in C", "in Python"])
def test_the_catchup_bench_reports_cpu_per_event_without_jetstream(tmp_path, native):
    assert "profile" not in catchup(tmp_path, native=native)


@pytest.mark.skipif(not PY_SPY.exists(), reason="no py-spy: bench/setup.sh installs it")
def test_the_catchup_bench_profiles_the_subscribers_broker(tmp_path):
    # enough events that the catch-up outlasts py-spy's attach: 20,000 are caught up in about 20 ms,
    # a handful of samples at 250/s, and none at all when the machine is busy (seen in make test)
    profile = catchup(tmp_path, "--profile", events=200_000)["profile"]
    Path(profile["raw"]).unlink()  # py-spy's raw stacks, kept in the bench's profiles/ (not the test's to keep)
    assert profile["where"] and profile["leaf"]
    assert any(name.startswith(("core.", "aio.", "storage.")) for name, _ in profile["where"])
