"""The build of tidings' compiled modules: the Spark tasks' fast path from event records to Arrow
columns (src/tidings/spark/_columns.c, docs/spark.md) and the publish intake's check and encoding
of a PUBLISH's events (src/tidings/core/publish/_batch.c), and a subscriber's broker's check of the
records other brokers send it (src/tidings/core/_records.c), an MQTT publisher's PUBLISH packets
read in place (src/tidings/core/mqtt/_publishes.c). Everything else is in pyproject.toml.
All four are optional: where no C compiler (or zlib headers) is found, tidings installs without them
and the same work is done in Python, with the same results, more slowly."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tidings.spark._columns", ["src/tidings/spark/_columns.c"], libraries=["z"],
                             extra_compile_args=["-O2"], optional=True),
                   # the publish intake's fast path (core/publish/batch.py), optional the same way
                   Extension("tidings.core.publish._batch", ["src/tidings/core/publish/_batch.c"],
                             extra_compile_args=["-O2"], optional=True),
                   # a subscriber's broker's check of peers' records (core/event.py), optional the same way
                   Extension("tidings.core._records", ["src/tidings/core/_records.c"],
                             extra_compile_args=["-O2"], optional=True),
                   # an MQTT publisher's run of PUBLISH packets read (core/mqtt/codec.py), optional the same way
                   Extension("tidings.core.mqtt._publishes", ["src/tidings/core/mqtt/_publishes.c"],
                             extra_compile_args=["-O2"], optional=True)])
