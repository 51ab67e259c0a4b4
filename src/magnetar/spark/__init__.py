"""magnetar's PySpark data source: `spark.read.format("magnetar")` and `spark.readStream.format("magnetar")`.

Install with the `[spark]` extra and call `register(spark)` once per session. The row schema
and the options are documented in docs/spark.md.
"""

from __future__ import annotations

from typing import Any

FORMAT = "magnetar"


def register(spark: Any) -> None:
    """Register the `magnetar` format with `spark` and let it receive filters.

    Spark refuses to plan a Python source that implements filter pushdown unless
    `spark.sql.python.filterPushdown.enabled` is on, so registering turns it on for the session.
    """
    from magnetar.spark.source import MagnetarDataSource  # noqa: PLC0415 (pyspark is optional)

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(MagnetarDataSource)


def compact(spark: Any, topic: str, service_url: str | None = None, path: str | None = None,
            **kwargs: Any) -> list[Any]:
    """Compact `topic` with Spark; see magnetar.spark.compaction.compact."""
    from magnetar.spark.compaction import compact as run  # noqa: PLC0415 (pyarrow is optional)

    return run(spark, topic, service_url, path, **kwargs)


__all__ = ["FORMAT", "compact", "register"]
