"""`tidings demo` with Spark, tiny: every stage of the PLDB pipeline exactly once and in order.

Real broker and tuple-store processes (one broker and the tuple store killed with kill -9 and
restarted), the health stream on the shared session, the archive's plots.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tidings.cli.demo import run_demo

pytestmark = pytest.mark.spark

STAGES = ["monitors -> tuple store (journal)", "queries -> tuple store (journal)",
          "tuple store answers -> query client", "Spark health stream -> sink (read back)",
          "recommendations -> tuple store (journal)"]


def test_a_tiny_pipeline_counts_nothing_lost_duplicated_or_reordered_at_any_stage(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_demo(tmp_path, hosts=4, rounds=10, spark=True, spark_session=spark)
    out = capsys.readouterr().out
    assert code == 0, out
    stages = [line for line in out.splitlines() if " received " in line]
    assert [line.split("received")[0].strip() for line in stages] == STAGES, out
    for line in stages:
        assert "lost 0 duplicated 0 reordered 0 unexpected 0" in line and "(exactly once, in order)" in line, line
    assert "miscounted 0" in stages[3]
    windows = int(re.search(r"received (\d+)/", stages[3]).group(1))  # type: ignore[union-attr]
    assert windows >= 4  # at least one window of each of the four sites
    assert f"received {windows}/{windows}" in stages[4]
    plots = re.search(r"plots of the archive \(Spark batch job\): (.*)", out)
    assert plots is not None
    for path in plots.group(1).split(", "):
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
