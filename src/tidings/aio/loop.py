"""The event loop both runtimes' drivers run on: uvloop's when installed, else asyncio's.

Its own module so that a client (tidings.sync, every Spark task) gets it without importing the
broker's runtime and, through it, every protocol core (about 0.25 s at each Python worker's start).
"""

from __future__ import annotations

import asyncio


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed, else asyncio's."""
    try:
        import uvloop  # noqa: PLC0415 - optional
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
