# The compiled fast path of core/publish/batch.py (_batch.c): its functions' signatures.
from typing import Any

Encoded = tuple[list[bytes], list[tuple[int, str, dict[str, Any], bytes]] | None, int, str | None, list[int],
                bytes | None]

def encode(events: list[object], known: dict[str, Any], size_max: int, pubend: str, first: int, service: str,
           instance: str, authenticated: bool, /) -> Encoded | None: ...
def scan(body: bytes, kind: int, /) -> tuple[int, int, int] | None: ...
def encode_frame(body: bytes, at: int, count: int, known: dict[str, Any], size_max: int, pubend: str, first: int,
                 service: str, instance: str, authenticated: bool, /) -> Encoded | None: ...
