"""bench/compare.py end to end, tiny: HEAD~1 against HEAD, one round of bench/run.py's test a for
one second each. On a shared machine the verdict is noise, so only the mechanics are checked: both
sides ran from worktrees of their own, the results file holds tagged lines of both, the table has
the figure with one value per side, and no worktree is left behind. A soak: two broker runs with
run.py's waits for a quiet machine take a minute or two."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.soak]

ROOT = Path(__file__).resolve().parents[2]


def worktrees() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True,
                          check=True).stdout


def test_compare_runs_head_against_its_parent(tmp_path: Path) -> None:
    out = tmp_path / "compare.jsonl"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "compare.py"), "--base", "HEAD~1", "--head", "HEAD",
                           "--rounds", "1", "--bench", "run:a", "--duration-s", "1", "--quiet-wait-s", "5",
                           "--out", str(out)], capture_output=True, text=True, timeout=900, check=False,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: head slower, which noise may make it
    assert "tidings-compare-" not in worktrees()
    assert "run 2 of 2: head" in proc.stderr
    for side in ("base", "head"):
        assert f"{side}: imports /" in proc.stderr and "tidings-compare-" in proc.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    sides = {x["tag"].split(":")[2] for x in lines if x.get("test") == "a"}
    assert sides == {"base", "head"}
    assert "| run a events/s | events/s | higher |" in proc.stdout and proc.stdout.count("(n=1)") >= 2
    assert "load average (1 min): before" in proc.stdout
