"""The exactly-once Spark sink: rows/s published from a DataFrame, and the cost of a re-run.

    .venv/bin/python bench/spark_sink_bench.py [--rows 1000000] [--partitions 2] [--rows-per-publish 1000]

Starts a fresh broker process and a local[2] SparkSession, warms the session up with a small write,
then writes `--rows` rows (channel `bench/sink/<i mod 16>`, a 100-byte payload, one attribute) with
`df.write.format("tidings")` and a `writeId`, and writes them again with the same `writeId` (every
row a duplicate). Prints one JSON line: rows/s of each write and the broker's duplicate count.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from tidings.testing import BrokerProcess

sys.path.insert(0, str(Path(__file__).parent))
from spark_local import local_session


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rows-per-publish", type=int, default=1000)
    args = ap.parse_args()
    from pyspark.sql import functions as F

    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "data") as broker:
        spark = local_session(Path(__file__).stem)

        def frame(rows: int):
            return (spark.range(rows, numPartitions=args.partitions)
                    .select(F.concat(F.lit("bench/sink/"), (F.col("id") % 16).cast("string")).alias("channel"),
                            F.expr("cast(lpad(cast(id as string), 100, 'x') as binary)").alias("payload"),
                            F.create_map(F.lit("i"), F.col("id")).alias("attributes")))

        def write(rows: int, write_id: str) -> float:
            start = time.perf_counter()
            (frame(rows).write.format("tidings").mode("append").option("broker", broker.address)
             .option("writeId", write_id).option("rowsPerPublish", str(args.rows_per_publish)).save())
            return time.perf_counter() - start

        write(1000, "warm-up")
        first = write(args.rows, "bench")
        again = write(args.rows, "bench")
        status = broker.status()
        spark.stop()
    print(json.dumps({
        "rows": args.rows, "partitions": args.partitions, "rows_per_publish": args.rows_per_publish,
        "write_s": round(first, 2), "rows_per_s": round(args.rows / first),
        "rerun_s": round(again, 2), "rerun_rows_per_s": round(args.rows / again),
        "duplicates": status.get("dedup_duplicates"), "last_tick": status.get("last_tick"),
    }))


if __name__ == "__main__":
    main()
