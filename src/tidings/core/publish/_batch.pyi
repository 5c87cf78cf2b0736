# The compiled fast path of core/publish/batch.py (_batch.c): its one function's signature.
from typing import Any

def encode(events: list[object], known: dict[str, Any], size_max: int, pubend: str, first: int, service: str,
           instance: str, authenticated: bool, /) -> tuple[list[tuple[int, bytes]],
                                                          list[tuple[int, str, dict[str, Any], bytes]] | None,
                                                          int, str | None] | None: ...
