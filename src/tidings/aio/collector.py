"""The cyclic garbage collector of a broker process, set for a loop that allocates per event.

CPython runs a young collection when its tracked objects allocated less those freed pass the first
threshold (700 by default). A broker holds each PUBLISH's objects (the decoded events, the records
and their deliveries) until the batch is durable, a millisecond or more later, so at the default
the young collections keep finding them alive and promoting them, and the full collections that
follow (one whenever the promoted reach a quarter of the old generation) walk the whole heap,
everything imported included. Measured in test (a) (bench/loads.py, 100-event PUBLISHes, one
broker): 0.6 µs of the broker's 2.3-2.6 µs of CPU per event went to the collector, 53 full
collections of about 15 ms in 5 s. With the first threshold at `YOUNG_OBJECTS_MAX` a batch is
freed before a collection sees it (9 young collections in the same run, 0.03 µs per event), and
freezing what startup built keeps it out of every later collection. The collector still runs:
cycles are found, at most `YOUNG_OBJECTS_MAX` objects late (a few MB at worst). `/metrics` shows
its passes (`python_gc_collections_total{generation}`; tests/integration/test_http.py holds them
rare under load)."""

from __future__ import annotations

import gc

YOUNG_OBJECTS_MAX = 50_000  # net tracked allocations before a young collection (CPython's default: 700)


def settle() -> None:
    """Called once the broker has started (recovered its log, listening): what was built so far
    lives as long as the process and is frozen out of the collections; the young threshold is
    raised (the older generations' thresholds kept)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS_MAX, middle, old)
