"""Lets PySpark find magnetar's data source by itself (SPARK-45917: a `pyspark_*` package
exposing `DefaultSource`), so `spark.read.format("magnetar")` works without `register()`.

Reads then take no filter pushdown (Spark's default leaves it off and refuses a pushdown
reader); `magnetar.spark.register(spark)` turns it on.
"""

from magnetar.spark.source import AutoRegisteredDataSource as DefaultSource

__all__ = ["DefaultSource"]
