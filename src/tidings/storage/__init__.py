"""Storage engines the network runtime drives: the pubend's event log, the persistent filtering
subsystem, the broker's identity and the lock that keeps one broker per data directory."""

from tidings.storage.files import LogCorruptError, StorageError
from tidings.storage.identity import load_or_create_identity
from tidings.storage.lock import DataDirectoryLock, DataDirectoryLocked
from tidings.storage.log import EventLog, RecoveryReport
from tidings.storage.pfs import Pfs, PfsRead, PfsStream
from tidings.storage.segment import SegmentInfo

__all__ = [
    "DataDirectoryLock",
    "DataDirectoryLocked",
    "EventLog",
    "LogCorruptError",
    "Pfs",
    "PfsRead",
    "PfsStream",
    "RecoveryReport",
    "SegmentInfo",
    "StorageError",
    "load_or_create_identity",
]
