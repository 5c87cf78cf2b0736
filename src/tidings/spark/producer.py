"""Idempotent publish from Spark: the producer id and sequence of every row the sink writes.

Theory of operation. A broker logs each `(producer, seq)` of an idempotent publish at most once
within its dedup window and answers a repeat with the original (pubend, tick) (docs/delivery.md,
core/publish/dedup.py). So the sink is exactly-once if every attempt to write a row names it with the same
`(producer, seq)`, and two different rows never share one. Spark re-runs writes in three ways:

- a **task retry** (or a speculative copy) writes the same partition of the same job again;
- a **replayed micro-batch** (an abort after tasks that did publish, a driver restarted from its
  checkpoint) writes the same batch id of the same query again, from the same offsets;
- a **re-run job** (`df.write` called again after a failure) writes the same rows in a new job.

What stays the same across all three is chosen as the row's name:

- `producer = "spark/<writeId>/<partition>"`. The write id is the query's id for a stream (Spark
  keeps it in the checkpoint, so a restarted query has the same one) and the `writeId` option for a
  batch write (without it, an id drawn once per job, which its retries share but a re-run does not);
  the partition is the Spark partition id of the task.
- `seq = batch << 32 | row`: the micro-batch id (0 for a batch write) in the high 32 bits and the
  row's index within its task's partition in the low 32. The consecutive rows of one task have
  consecutive seqs, so a `publish_many` of them is one entry of the broker's window.

This relies on Spark's own premise for exactly-once sinks: a re-run task sees the same rows in the
same order. Where the order is not deterministic (after a shuffle without a sort), the rows carry
a `key` and are named by it instead: `producer = "spark/<writeId>/key"`, `seq` the key itself when
it is a non-negative integer, else the first 8 bytes of its BLAKE2b digest (two distinct keys share
a seq with probability 2^-64 per pair). The same key is then the same event, whichever task or
batch writes it.

Pure functions: no Spark, no broker, no clock.
"""

from __future__ import annotations

import hashlib

from tidings.core.publish.dedup import PRODUCER_BYTES_MAX, PSEQ_MAX

WRITE_ID_BYTES_MAX = 200  # leaves room in the producer id for "spark/", "/" and a partition id
ROW_BITS = 32
ROWS_MAX = 1 << ROW_BITS  # rows of one partition in one micro-batch (or batch write)
BATCHES_MAX = (PSEQ_MAX >> ROW_BITS) + 1  # micro-batch ids a query can name

PREFIX = "spark/"
KEYED = "key"  # the last component of the producer of keyed rows


class SequenceError(ValueError):
    """A row cannot be given a sequence (too many rows or micro-batches, a negative key)."""


def check_write_id(write_id: str) -> str:
    """`write_id` if it fits in a producer id; ValueError naming the option otherwise."""
    size = len(write_id.encode("utf-8", "surrogatepass"))
    if not write_id.strip() or size > WRITE_ID_BYTES_MAX:
        raise ValueError(f'tidings: option "writeId" must be 1 to {WRITE_ID_BYTES_MAX} bytes, got {size}')
    try:
        write_id.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError('tidings: option "writeId" must be valid UTF-8') from None
    return write_id


def producer_id(write_id: str, partition: int) -> str:
    """The producer id of the rows a task writes in `partition`."""
    assert partition >= 0, partition
    producer = f"{PREFIX}{write_id}/{partition}"
    assert len(producer.encode()) <= PRODUCER_BYTES_MAX, producer
    return producer


def keyed_producer_id(write_id: str) -> str:
    """The producer id of keyed rows, whichever partition writes them."""
    return f"{PREFIX}{write_id}/{KEYED}"


def row_seq(batch: int, row: int) -> int:
    """The seq of the `row`-th row (from 0) of a task's partition in micro-batch `batch`."""
    if not 0 <= batch < BATCHES_MAX:
        raise SequenceError(f"micro-batch id {batch} is outside 0..{BATCHES_MAX - 1}: the sink cannot name its rows")
    if not 0 <= row < ROWS_MAX:
        raise SequenceError(f"a partition of more than {ROWS_MAX} rows in one micro-batch cannot be written "
                            "idempotently: repartition into more partitions")
    return batch << ROW_BITS | row


def key_seq(key: int | str | bytes) -> int:
    """The seq of a keyed row: a non-negative integer key itself, else 64 bits of the key's hash."""
    if isinstance(key, bool):
        raise SequenceError(f"a key must be an integer, a string or bytes, not {key!r}")
    if isinstance(key, int):
        if not 0 <= key <= PSEQ_MAX:
            raise SequenceError(f"an integer key must be between 0 and {PSEQ_MAX}, got {key}")
        return key
    if isinstance(key, str):
        key = key.encode("utf-8", "surrogatepass")
    if not isinstance(key, bytes | bytearray):
        raise SequenceError(f"a key must be an integer, a string or bytes, not {type(key).__name__}")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
