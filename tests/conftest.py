"""Suite-wide settings. Hypothesis: no per-example deadline (a loaded 2-core CI machine makes
wall-clock deadlines flaky), and on CI a derandomized run so a red build replays exactly."""

import os

import pytest
from hypothesis import settings

settings.register_profile("tidings", deadline=None, print_blob=True)
settings.register_profile("ci", parent=settings.get_profile("tidings"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "tidings")


# Long sweeps and soaks run under `make soak` (TIDINGS_SOAK=1) only; in `make test` they are
# skipped with that reason, so the suite stays within its time. A test that has a short form for
# `make test` and a long one for the soak reads `SOAK` and sizes itself.
SOAK = os.environ.get("TIDINGS_SOAK") == "1"


def soak_params(*values: object) -> list[object]:
    """Parameter sets that run under `make soak` only: more seeds of a case that `make test` plays
    with the others of the list (docs/testing.md)."""
    return [pytest.param(*v if isinstance(v, tuple) else (v,), marks=pytest.mark.soak) for v in values]


def pytest_collection_modifyitems(config: object, items: list[pytest.Item]) -> None:
    if SOAK:
        return
    skip = pytest.mark.skip(reason="a long run: make soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
