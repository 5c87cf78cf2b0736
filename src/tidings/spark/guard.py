"""One clear line, instead of Spark's ModuleNotFoundError traceback, when a Spark worker cannot
import tidings.

Spark pickles the data source, its readers and its writers on the driver and unpickles them in
Python workers on the executors. Pickled as usual, an object names its class by module, so a
worker without tidings (or without its dependencies: msgpack, pyarrow) fails inside pickle with a
bare `No module named 'tidings'` under a page of Spark's frames, which says nothing of the fix.

So these objects pickle through `restore` (`ImportGuarded.__reduce__`): their state travels as
opaque bytes, and `restore` itself travels by value (this module is registered with cloudpickle
to be pickled by value, and imports nothing of tidings), so a worker can run it without tidings.
It imports the object's module first; when that fails it raises one ImportError whose message
names the interpreter and the fix; only then does it unpickle the state.
"""

from __future__ import annotations

import importlib
import pickle
import sys
from typing import Any

FIX = ("install tidings with its spark extra on every executor (pip install 'tidings[spark]'), or start the "
       "session with tidings.spark.workers.configure(builder) so that executors run the driver's Python "
       "(docs/spark.md#deployment)")


def restore(module: str, name: str, state: bytes) -> Any:
    """The object of class `module.name` with the pickled `state`; ImportError in one line when
    this interpreter cannot import `module`."""
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ImportError(f"tidings: this Spark worker's Python ({sys.executable}) cannot import {module}: "
                          f"{exc}; {FIX}") from None
    obj = cls.__new__(cls)
    obj.__dict__.update(pickle.loads(state))
    return obj


class ImportGuarded:
    """Pickles through `restore`: a worker without tidings gets one clear line, not a traceback."""

    _guard_class: str | None = None  # the importable class (in its MRO) to restore as; default its own

    def _guard_state(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __reduce__(self) -> tuple[Any, ...]:
        from pyspark import cloudpickle  # noqa: PLC0415  (on the driver only)

        cls = next((c for c in type(self).__mro__ if c.__qualname__ == self._guard_class), type(self))
        # pyspark's vendored cloudpickle has no annotations, so strict mypy refuses calls into it
        state = cloudpickle.dumps(self._guard_state())  # type: ignore[no-untyped-call]
        return (restore, (cls.__module__, cls.__qualname__, state))


def _register() -> None:
    from pyspark import cloudpickle  # noqa: PLC0415

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]  # unannotated, as above


_register()
