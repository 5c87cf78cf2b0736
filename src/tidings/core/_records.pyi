# The compiled check of core/event.py's records_routing_fields (_records.c): its one function's signature.
from typing import Any

def routing(records: list[object], prefix: bytes, /) -> tuple[list[tuple[str, dict[str, Any]]], list[str]] | None: ...
