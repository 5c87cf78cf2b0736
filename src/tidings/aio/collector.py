"""The garbage collector's settings in a broker process.

CPython frees almost every object of the event path by reference counting; its cyclic collector
only looks for reference cycles, and it runs a young-generation pass each time 700 more container
objects have been made than freed. A broker makes containers fast (a decoded PUBLISH frame of 100
events is a few hundred lists, tuples and dicts that live until the batch is logged), and at the
default thresholds the older passes that follow walk far more than the young: during bench test
(a) (about 460,000 events in 5 s) a broker at CPython's defaults ran 1,768 young, 160 middle and
14 full passes, the full ones over every object the broker holds, and py-spy put 22-38 % of the
event loop's samples in `gc_collect_main` (bench/profile.py; docs/benchmarks.md).

So a broker raises the young threshold (the batch in hand is freed by reference counting long
before the next pass; the same test then ran 3 young passes and no other) and, once started,
freezes what startup made (modules, configuration, the recovered log's index, the overlay's
tables): those objects are never walked again. Cycles are still collected; a broker makes few
(exceptions with their tracebacks, a closed connection's protocol objects), and they wait at most
one young pass. `/metrics` shows the passes (`python_gc_collections_total{generation}`).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD_OBJECTS = 50_000  # container allocations (net of frees) between young passes; CPython: 700
OLDER_PASSES = (20, 20)  # young passes per middle pass, middle passes per full pass; CPython: (10, 10)


def tune() -> None:
    """Fewer young passes: set before the broker starts."""
    gc.set_threshold(YOUNG_THRESHOLD_OBJECTS, *OLDER_PASSES)


def freeze_startup() -> None:
    """Move everything alive now into the permanent generation (after start and recovery): a full
    pass first, so that startup's garbage is not frozen with it."""
    gc.collect()
    gc.freeze()
