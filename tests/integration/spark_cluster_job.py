"""A batch job on a Spark standalone cluster, run as its own process by the cluster test.

    python spark_cluster_job.py MASTER_URL BROKER

It starts a session on MASTER_URL through `tidings.spark.workers.configure` (the executors run
this interpreter with this tidings on their path), reads every event on `in/#` of the overlay of
BROKER, writes one row per event read on `out/<channel>` through the exactly-once sink, and prints
one JSON line: the payloads read, the rows written, and the working directories of the Python
workers that ran tasks (a standalone worker runs its executors in its own work directory).
"""

import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tidings.spark import register, workers


def main(master, broker):
    builder = (SparkSession.builder.master(master).appName("tidings-standalone")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.executor.memory", "512m")
               .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
               .config("spark.sql.shuffle.partitions", "2"))
    spark = workers.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    events = (spark.read.format("tidings").option("broker", broker).option("pattern", "in/#")
              .option("partitions", "2").load())
    read = [bytes(r["payload"]) for r in events.select("payload").collect()]
    out = events.select(F.concat(F.lit("out/"), "channel").alias("channel"), "payload")
    out.write.format("tidings").mode("append").option("broker", broker).option("writeId", "standalone").save()
    places = spark.sparkContext.parallelize(range(4), 2).map(lambda _: os.getcwd()).distinct().collect()
    print(json.dumps({"read": [p.decode() for p in read], "written": len(read), "task_dirs": places}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:3])
