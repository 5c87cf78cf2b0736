"""The network models: distances that make sense, and latency matrix files read or refused clearly."""

from __future__ import annotations

import random

import pytest

from tidings.core.units import MILLISECOND_NS
from tidings.sim.overlay.topology import (
    ACCESS_RTT_MS,
    MatrixTopology,
    PlaneTopology,
    SphereTopology,
    TopologyError,
    make_topology,
)


def test_plane_and_sphere_rtts_are_symmetric_bounded_and_zero_to_oneself():
    for topology in (PlaneTopology(200, random.Random(1)), SphereTopology(200, random.Random(1))):
        for i, j in [(0, 1), (5, 150), (199, 3)]:
            assert topology.rtt_ns(i, j) == topology.rtt_ns(j, i) >= ACCESS_RTT_MS * MILLISECOND_NS
        assert topology.rtt_ns(7, 7) == 0
        worst = max(topology.rtt_ms(0, j) for j in range(1, 200))
        assert worst < 2 + 215  # the plane's diagonal is 212 ms; half the Earth's circumference 200 ms
        assert topology.nearest(0, range(1, 200)) == min(range(1, 200), key=lambda j: topology.rtt_ms(0, j))


def test_a_matrix_file_is_read_with_comments_and_blank_lines(tmp_path):
    path = tmp_path / "rtt.txt"
    path.write_text("# three hosts\n0 10 20.5\n\n10 0 30\n20.5 30 0\n")
    topology = make_topology(f"matrix:{path}", 3, random.Random(0))
    assert topology.rtt_ns(0, 2) == 20_500_000
    assert topology.rtt_ns(1, 2) == 30 * MILLISECOND_NS


@pytest.mark.parametrize(("text", "error"), [
    ("", "no rows"),
    ("0 1\n1 0 2\n", ":2: 3 values, the first row has 2"),
    ("0 1\n1 x\n", ":2: every value must be a number"),
    ("0 -1\n1 0\n", ":1: RTTs must be finite and non-negative"),
    ("0 1 2\n1 0 2\n", "must be square"),
    ("5 1\n1 0\n", "host 0's RTT to itself is 5.0"),
    ("0 nan\n1 0\n", "finite"),
])
def test_bad_matrix_files_are_refused_with_the_line_at_fault(text, error):
    with pytest.raises(TopologyError, match=error.replace(".", r"\.")):
        MatrixTopology.parse(text, "m.txt")


def test_a_matrix_smaller_than_the_overlay_or_a_missing_file_or_an_unknown_model_is_refused(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("0 1\n1 0\n")
    with pytest.raises(TopologyError, match="2 hosts in the matrix, 3 brokers"):
        make_topology(f"matrix:{path}", 3, random.Random(0))
    with pytest.raises(TopologyError, match="cannot read"):
        make_topology(f"matrix:{tmp_path / 'none.txt'}", 3, random.Random(0))
    with pytest.raises(TopologyError, match="unknown network model"):
        make_topology("torus", 3, random.Random(0))
