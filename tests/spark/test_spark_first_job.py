"""A newcomer's first Spark job, run as their script runs: its own process, with no
PYSPARK_PYTHON and the virtual environment's bin/ off PATH (so PATH's `python3` has no
magnetar), reading topics whose entries were stored without PIP-70's prefix: first all of one,
then another up to a broker index (which finds nothing there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from standalone import NO_ENTRY_METADATA, Standalone

pytestmark = pytest.mark.spark

SCRIPT = """
import sys
import magnetar.spark
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
rows = spark.read.format("magnetar").option("topic", "orders").load(sys.argv[1]).collect()
print("rows", len(rows))
print("with broker_time", sum(row.broker_time is not None for row in rows))
ending = '{"persistent://public/default/refunds": {"-1": 5}}'
refunds = spark.read.format("magnetar").option("topic", "refunds").option("endingOffsets", ending).load(sys.argv[1])
print("refunds", refunds.count())
spark.stop()
"""
PARTITIONS = 3
MESSAGES = 30


def _outside_the_venv() -> dict[str, str]:
    """The environment of a shell where the venv is not activated."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = path
    return env


@pytest.fixture(scope="module")
def first_job(tmp_path_factory) -> subprocess.CompletedProcess[str]:
    data_dir = tmp_path_factory.mktemp("first-job") / "data"
    broker = Standalone(data_dir, list(NO_ENTRY_METADATA)).start()
    try:
        status, _, body = http("PUT", f"{broker.admin_url}/admin/v2/persistent/public/default/orders/partitions",
                               str(PARTITIONS).encode())
        assert status == 204, body
        client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        producer = client.create_producer("orders")
        for i in range(MESSAGES):
            producer.send(f"order-{i}".encode(), partition_key=f"customer-{i % 7}")
        refunds = client.create_producer("refunds")
        for i in range(MESSAGES):
            refunds.send(f"refund-{i}".encode())
        client.close()
    finally:
        broker.stop()
    env = _outside_the_venv()
    assert shutil.which("python3", path=env["PATH"]) not in (None, sys.executable)
    return subprocess.run([sys.executable, "-c", SCRIPT, str(data_dir)], env=env, capture_output=True, text=True,
                          timeout=240, check=False)


def test_workers_run_the_drivers_python_without_pyspark_python(first_job):
    assert first_job.returncode == 0, first_job.stderr[-3000:]
    assert f"rows {MESSAGES}" in first_job.stdout


def test_a_query_by_index_meeting_entries_without_the_prefix_says_so_once(first_job):
    assert first_job.returncode == 0, first_job.stderr[-3000:]
    assert "with broker_time 0" in first_job.stdout
    assert "refunds 0" in first_job.stdout  # what the newcomer saw, now with a reason beside it
    warnings = [line for line in first_job.stderr.splitlines() if "without PIP-70 broker entry metadata" in line]
    assert len(warnings) == 1, first_job.stderr[-3000:]
    assert "refunds" in warnings[0], warnings  # the read of every partition of orders probed nothing
    assert "brokerEntryMetadataInterceptors=" in warnings[0] and "broker_time and index" in warnings[0]
