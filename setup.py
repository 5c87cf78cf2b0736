"""The build of tidings' one compiled module: the Spark tasks' fast path from event records to Arrow
columns (src/tidings/spark/_columns.c, docs/spark.md). Everything else is in pyproject.toml. It is
optional: where no C compiler or zlib headers are found, tidings installs without it and the tasks
decode in Python, the same rows more slowly."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tidings.spark._columns", ["src/tidings/spark/_columns.c"], libraries=["z"],
                             extra_compile_args=["-O2"], optional=True)])
