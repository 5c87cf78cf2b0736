"""A streaming Spark job as a user would deploy one, run as its own process by the driver-kill test.

    python spark_stream_job.py SOURCE_BROKER SINK_BROKER CHECKPOINT_DIR

It reads `in/#` from the overlay of SOURCE_BROKER (durable subscription "driver-kill", from the
earliest retained event) and republishes every event on `out/<channel>` through the exactly-once
sink at SINK_BROKER, with a 0.5 s trigger, its state in CHECKPOINT_DIR. When the query fails (the
sink's broker is down, so its tasks cannot publish; the source rides through a broker's loss), the
job starts it again from the checkpoint, as a supervisor would, at most RESTARTS_MAX times. It
prints one line per query start ("query started N") and per failure, and runs until it is killed.
"""

import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.utils import StreamingQueryException

from tidings.spark import register

RESTARTS_MAX = 200
RESTART_BACKOFF_S = 0.5  # a broker being restarted: give it a moment rather than spin
TRIGGER = "0.5 seconds"


def main(source, sink, checkpoint):
    spark = (SparkSession.builder.master("local[2]").appName("tidings-driver-kill")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             # the JVM's quick compiler only: this job is restarted often and runs little
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    for attempt in range(RESTARTS_MAX):
        events = (spark.readStream.format("tidings").option("broker", source).option("pattern", "in/#")
                  .option("durableName", "driver-kill").option("startingOffsets", "earliest").load())
        query = (events.select(F.concat(F.lit("out/"), "channel").alias("channel"), "payload", "attributes")
                 .writeStream.format("tidings").option("broker", sink)
                 .option("checkpointLocation", checkpoint).trigger(processingTime=TRIGGER).start())
        print(f"query started {attempt}", flush=True)
        try:
            query.awaitTermination()
        except StreamingQueryException as exc:
            print(f"query failed: {str(exc).splitlines()[0][:200]}", flush=True)
        time.sleep(RESTART_BACKOFF_S)
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
