"""The broker's pubend id, chosen once and kept for the life of its data directory.

Ticks are only meaningful per pubend, and a subscriber's checkpoint token names pubends, so a broker
that restarts on the same data must come back as the same pubend. The id is created on first start
(by the caller's `new_id`, so this module draws no randomness) and stored in `identity.json`, written
atomically: after a crash the file holds the id or does not exist, never half of it. An unreadable
file is therefore real damage, and a new id is never silently made up in its place (that would fork
the pubend's stream).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable

from tidings.storage.files import LogCorruptError, ensure_directory, read_small_file, write_atomically

IDENTITY_FILE = "identity.json"


def load_or_create_identity(directory: pathlib.Path, new_id: Callable[[], str]) -> str:
    """The pubend id stored in `directory`, creating and persisting `new_id()` on first use."""
    directory = pathlib.Path(directory)
    path = directory / IDENTITY_FILE
    data = read_small_file(path)
    if data is not None:
        try:
            pubend_id = json.loads(data)["pubend_id"]
        except (ValueError, KeyError, TypeError) as exc:
            raise LogCorruptError(f"{path}: unreadable ({exc}); it is only ever replaced atomically") from exc
        if not isinstance(pubend_id, str) or not pubend_id:
            raise LogCorruptError(f"{path}: pubend_id must be a non-empty string, got {pubend_id!r}")
        return pubend_id
    pubend_id = new_id()
    assert isinstance(pubend_id, str) and pubend_id, "new_id must return a non-empty string"
    ensure_directory(directory)
    write_atomically(path, json.dumps({"pubend_id": pubend_id}).encode() + b"\n")
    return pubend_id
