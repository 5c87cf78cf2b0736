"""bench/pfs_bench.py runs end to end in a tiny configuration, so it does not rot; only the shape of
its figures is checked (the PFS writes less than a log per subscriber), not their size."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_pfs_bench_runs_tiny(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "pfs_bench.py"), "--seconds", "2", "--subscribers", "20",
                           "--dir", str(tmp_path)], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["events"] == 1600 and result["matches_per_event"] == 5
    assert result["logs_bytes"] > result["pfs_bytes"] > 0
    assert list(tmp_path.iterdir()) == []  # the stores are removed afterwards
