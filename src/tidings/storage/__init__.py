"""Storage engines the network runtime drives: the pubend's event log and the broker's identity."""

from tidings.storage.files import LogCorruptError, StorageError
from tidings.storage.identity import load_or_create_identity
from tidings.storage.log import EventLog, RecoveryReport
from tidings.storage.segment import SegmentInfo

__all__ = [
    "EventLog",
    "LogCorruptError",
    "RecoveryReport",
    "SegmentInfo",
    "StorageError",
    "load_or_create_identity",
]
