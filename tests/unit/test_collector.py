"""The broker process's collector settings (aio/collector.py)."""

from __future__ import annotations

import gc

from tidings.aio import collector


def test_settle_freezes_startup_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    try:
        kept = [[i] for i in range(1000)]  # built "at startup": alive when settle runs
        collector.settle()
        assert gc.get_threshold() == (collector.YOUNG_OBJECTS_MAX, before[1], before[2])
        assert gc.get_freeze_count() >= frozen + len(kept)
        assert gc.isenabled()  # cycles are still collected, later
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
