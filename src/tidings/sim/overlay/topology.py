"""Where the simulated brokers sit, and how far apart they are: the proximity metric of the overlay.

Theory of operation. Pastry's locality rests on "a scalar proximity metric" between any two nodes;
in the simulator that metric is the round-trip time, and a `Topology` answers `rtt_ns(i, j)` for
host indices 0..n-1. Three models:

- `PlaneTopology`: hosts uniform on a square (the Pastry paper's own set-up); the RTT is a fixed
  access cost plus the Euclidean distance, the square's side measured in milliseconds.
- `SphereTopology`: hosts uniform on the Earth's surface; the RTT is the access cost plus twice the
  great-circle distance over the speed of light in fibre (about 200 km per millisecond), so the far
  side of the planet is ~200 ms away.
- `MatrixTopology`: a measured latency matrix read from a file (format below), for the cases where
  neither geometry is believable. It is the only model whose memory grows with n**2, so it is meant
  for hundreds to a few thousand hosts.

Coordinates are kept in flat `array('d')` columns rather than per-host objects, so 100,000 hosts
cost a few megabytes, and a distance is computed when asked for (no n**2 table). A model draws its
points from the random stream it is given, so the same seed places the same hosts.

Matrix file format: plain text, one line per host, `n` lines of `n` whitespace-separated RTT values
in milliseconds (decimals allowed); line i column j is the RTT from host i to host j. Blank lines
and lines starting with `#` are skipped. The matrix must be square, non-negative and finite, with
a zero diagonal; an asymmetric pair is used as measured in each direction. Any other content is a
`TopologyError` naming the line.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Iterable
from pathlib import Path

from tidings.core.units import MILLISECOND_NS

EARTH_RADIUS_KM = 6371.0
FIBRE_KM_PER_MS = 200.0
ACCESS_RTT_MS = 2.0
PLANE_SIDE_MS = 150.0


class TopologyError(ValueError):
    """A network model cannot be built (a bad matrix file, too few hosts in it, an unknown name)."""


class Topology:
    """A proximity metric over hosts 0..n-1; subclasses supply `rtt_ms`."""

    name = "topology"

    def __init__(self, n: int) -> None:
        self.n = n

    def rtt_ms(self, i: int, j: int) -> float:
        raise NotImplementedError

    def rtt_ns(self, i: int, j: int) -> int:
        """The round-trip time between hosts i and j, in integer nanoseconds (0 for a host itself)."""
        if i == j:
            return 0
        return int(self.rtt_ms(i, j) * MILLISECOND_NS)

    def nearest(self, i: int, candidates: Iterable[int]) -> int:
        """The candidate host nearest to host i (the first one on a tie); candidates is not empty."""
        rtt = self.rtt_ms
        return min(candidates, key=lambda j: rtt(i, j))


class PlaneTopology(Topology):
    name = "plane"

    def __init__(self, n: int, rng: random.Random, side_ms: float = PLANE_SIDE_MS,
                 access_ms: float = ACCESS_RTT_MS) -> None:
        super().__init__(n)
        self.access_ms = access_ms
        self.xs = array("d", (rng.uniform(0.0, side_ms) for _ in range(n)))
        self.ys = array("d", (rng.uniform(0.0, side_ms) for _ in range(n)))

    def rtt_ms(self, i: int, j: int) -> float:
        return self.access_ms + math.hypot(self.xs[i] - self.xs[j], self.ys[i] - self.ys[j])

    def nearest(self, i: int, candidates: Iterable[int]) -> int:
        # The hot loop of the steady-state construction: squared distances, no call per candidate.
        xs, ys = self.xs, self.ys
        xi, yi = xs[i], ys[i]
        best, best_d = -1, math.inf
        for j in candidates:
            d = (xs[j] - xi) ** 2 + (ys[j] - yi) ** 2
            if d < best_d:
                best, best_d = j, d
        return best


class SphereTopology(Topology):
    name = "sphere"

    def __init__(self, n: int, rng: random.Random, access_ms: float = ACCESS_RTT_MS) -> None:
        super().__init__(n)
        self.access_ms = access_ms
        # A uniform point on the sphere: z uniform in [-1, 1], longitude uniform (Archimedes).
        xs, ys, zs = array("d"), array("d"), array("d")
        for _ in range(n):
            z = rng.uniform(-1.0, 1.0)
            lon = rng.uniform(0.0, 2.0 * math.pi)
            r = math.sqrt(max(0.0, 1.0 - z * z))
            xs.append(r * math.cos(lon))
            ys.append(r * math.sin(lon))
            zs.append(z)
        self.xs, self.ys, self.zs = xs, ys, zs

    def rtt_ms(self, i: int, j: int) -> float:
        xs, ys, zs = self.xs, self.ys, self.zs
        # The chord length gives the central angle without acos's loss of precision near 0.
        chord = math.sqrt((xs[i] - xs[j]) ** 2 + (ys[i] - ys[j]) ** 2 + (zs[i] - zs[j]) ** 2)
        angle = 2.0 * math.asin(min(1.0, chord / 2.0))
        return self.access_ms + 2.0 * angle * EARTH_RADIUS_KM / FIBRE_KM_PER_MS


class MatrixTopology(Topology):
    name = "matrix"

    def __init__(self, rows: list[array[float]]) -> None:
        super().__init__(len(rows))
        self.rows = rows

    def rtt_ms(self, i: int, j: int) -> float:
        return self.rows[i][j]

    @staticmethod
    def parse(text: str, source: str = "matrix") -> MatrixTopology:
        rows: list[array[float]] = []
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                row = array("d", (float(field) for field in line.split()))
            except ValueError:
                raise TopologyError(f"{source}:{lineno}: every value must be a number of ms") from None
            if any(not math.isfinite(v) or v < 0 for v in row):
                raise TopologyError(f"{source}:{lineno}: RTTs must be finite and non-negative")
            if rows and len(row) != len(rows[0]):
                raise TopologyError(f"{source}:{lineno}: {len(row)} values, the first row has {len(rows[0])}")
            rows.append(row)
        if not rows:
            raise TopologyError(f"{source}: no rows (expected n lines of n RTTs in ms)")
        if len(rows) != len(rows[0]):
            raise TopologyError(f"{source}: {len(rows)} rows of {len(rows[0])} values; the matrix must be square")
        for i, row in enumerate(rows):
            if row[i] != 0:
                raise TopologyError(f"{source}: host {i}'s RTT to itself is {row[i]}, not 0")
        return MatrixTopology(rows)

    @staticmethod
    def load(path: str | Path) -> MatrixTopology:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise TopologyError(f"cannot read latency matrix {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise TopologyError(f"{path}: not a text file") from None
        return MatrixTopology.parse(text, str(path))


def make_topology(spec: str, n: int, rng: random.Random) -> Topology:
    """`plane`, `sphere` or `matrix:FILE` for n hosts (a matrix must have at least n of them)."""
    if spec == "plane":
        return PlaneTopology(n, rng)
    if spec == "sphere":
        return SphereTopology(n, rng)
    if spec.startswith("matrix:"):
        matrix = MatrixTopology.load(spec.removeprefix("matrix:"))
        if matrix.n < n:
            raise TopologyError(f"{spec}: {matrix.n} hosts in the matrix, {n} brokers asked for")
        return matrix
    raise TopologyError(f"unknown network model {spec!r}: plane, sphere or matrix:FILE")
