"""The local SparkSession the Spark benchmarks run on: local[2], loopback only, no UI or progress
bars, 2 shuffle partitions, the workers on this interpreter, the `tidings` format registered."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_session(app: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tidings.spark import register

    spark = (SparkSession.builder.master("local[2]").appName(app).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
