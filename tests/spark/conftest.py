"""Spark fixtures: one local[2] SparkSession per test module."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from optional import optional_module

optional_module("pyspark")
optional_module("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402 (after the check above)

import magnetar.spark  # noqa: E402


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must import magnetar from this venv
    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(session)
    yield session
    session.stop()
