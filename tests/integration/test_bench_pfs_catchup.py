"""bench/pfs_catchup_bench.py in a small configuration, with the tree rooted at the broker between the
subscriber's and the publisher's: a PFS catch-up through that forwarder has the publisher's broker
read at most twice the records it delivers (issue 21; docs/delivery.md "Complete nacks"), and every
match arrives once, in order, both there and refiltered elsewhere. One match per publish batch of
500: matches within one batch are closer than `nack_merge_ticks` and fetched as one range."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_a_pfs_catchup_through_a_forwarder_reads_about_what_it_delivers(tmp_path):
    out = tmp_path / "results.jsonl"
    proc = subprocess.run([sys.executable, str(BENCH / "pfs_catchup_bench.py"), "--root", "1", "--rate", "2000",
                           "--seconds", "5", "--every", "500", "--limit-s", "60",
                           "--out", str(out)],
                          capture_output=True, text=True, timeout=240, check=False,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    own, other = [json.loads(line) for line in out.read_text().splitlines()]
    assert own["resumed_at"] == "own broker (PFS)" and own["root"] == 1
    for result in (own, other):
        assert result["received"] == result["matching"] == 20 and result["in_order"]
    assert own["pfs_catchups"] == 1
    assert own["broker1_ticks_silenced"] > 0  # the forwarder had let the absence go, and fetched only the matches
    assert own["origin_records_read"] <= 2 * own["matching"], own
    assert other["origin_records_read"] >= 10_000  # refiltering reads the whole absence
