"""magnetar's PySpark data source: `spark.read.format("magnetar")` and `spark.readStream.format("magnetar")`.

Install with the `[spark]` extra and call `register(spark)` once per session. The row schema
and the options are documented in docs/spark.md.

Layering: above magnetar.broker, magnetar.client and magnetar.admin_client; may import them
and everything below (broker for compaction's rules, the admin client to run compaction
through a broker, formats, credentials, storage for reading a data dir directly, wire,
plugins). Beside magnetar.admin, magnetar.functions and magnetar.kafka, which it never
imports; never imports magnetar.cli or magnetar.testing. Enforced by import-linter (pyproject.toml).
"""

from __future__ import annotations

import os
import sys
from typing import Any

FORMAT = "magnetar"


def _workers_run_this_python() -> None:
    """Spark starts its Python workers, the one that finds `pyspark_magnetar` among them,
    with $PYSPARK_PYTHON, else with whatever `python3` is first on PATH: outside an activated
    virtual environment, one without magnetar, and the read fails with DATA_SOURCE_NOT_FOUND.
    The Python importing this on the driver has magnetar, so it becomes the workers' unless
    the user chose one. Spark's JVM copies the variable when it starts, so this holds for
    sessions started after the import; the variable set in a worker changes nothing."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


_workers_run_this_python()


def register(spark: Any) -> None:
    """Register the `magnetar` format with `spark` and let it receive filters.

    Spark refuses to plan a Python source that implements filter pushdown unless
    `spark.sql.python.filterPushdown.enabled` is on, so registering turns it on for the session.
    """
    from magnetar.spark.source import MagnetarDataSource  # noqa: PLC0415 (pyspark is optional)

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    _quiet_replacement(spark)
    spark.dataSource.register(MagnetarDataSource)


#: The JVM logger of Spark's registry of Python data sources.
_DATA_SOURCE_MANAGER = "org.apache.spark.sql.execution.datasources.DataSourceManager"


def _quiet_replacement(spark: Any) -> None:
    """Registering replaces the source PySpark found by itself (pyspark_magnetar), which
    Spark's DataSourceManager reports as a WARN on every call and again for every session it
    clones (each streaming query's): a warning users can do nothing about, for the very thing
    they asked. Those are the only two warnings that logger has ("replaced a statically
    registered data source", "replaced a previously registered data source"), so it is set to
    ERROR. A session without a JVM gateway (Spark Connect) is left as it is."""
    try:
        log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    except Exception:  # Spark Connect's sessions have no sparkContext here
        return
    log4j.core.config.Configurator.setLevel(_DATA_SOURCE_MANAGER, log4j.Level.ERROR)


def compact(spark: Any, topic: str, service_url: str | None = None, path: str | None = None,
            **kwargs: Any) -> list[Any]:
    """Compact `topic` with Spark; see magnetar.spark.compaction.compact."""
    from magnetar.spark.compaction import compact as run  # noqa: PLC0415 (pyarrow is optional)

    return run(spark, topic, service_url, path, **kwargs)


__all__ = ["FORMAT", "compact", "register"]
