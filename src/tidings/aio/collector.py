"""The garbage collector's settings in a broker process.

CPython frees almost every object of the event path by reference counting; its cyclic collector
only looks for reference cycles, and it runs a young-generation pass each time 700 more container
objects have been made than freed. A broker makes containers fast (a decoded PUBLISH frame of 100
events is a few hundred lists, tuples and dicts that live until the batch is logged), so at the
default threshold a young pass ran every frame or two, walked the batch still in hand and promoted
it to the older generations, whose passes then walked it again: py-spy put 22 % of the event
loop's samples of bench test (a) in `gc_collect_main` (bench/profile.py, docs/benchmarks.md).

So a broker raises the young threshold (the batch in hand is freed by reference counting long
before the next pass) and, once started, freezes what startup made (modules, configuration, the
recovered log's index, the overlay's tables): those objects are never walked again. Cycles still
get collected; a broker makes few (exceptions with their tracebacks, a closed connection's
protocol objects), and they wait at most one young pass.
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
