"""Pushdown of broker_time / index / partition filters returns exactly what a full read + filter does."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from pyspark.sql import functions as F
from pyspark.sql.datasource import GreaterThanOrEqual
from spark_helpers import millis, write_entries

from magnetar.spark.offsets import TopicPartition
from magnetar.spark.options import parse_options
from magnetar.spark.source import MagnetarBatchReader, PushedFilters
from magnetar.spark.storage_reader import Bounds, StorageTopics

pytestmark = pytest.mark.spark

NAME = "public/default/persistent/pushdown"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[str, list[tuple[int, int, str | None]]]:
    """~2000 messages in entries of 1..15 messages, broker times with ties, small ledgers;
    the first 20 entries carry no PIP-70 prefix (written before interceptors were on)."""
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("pushdown")
    entries, rows = [], []
    index, when = -1, 1_000
    for n in range(260):
        count = rng.randint(1, 15)
        batched = count > 1 or rng.random() < 0.5
        messages = [(f"m{n}-{i}".encode(), {"colour": rng.choice(["red", "blue"])}) for i in range(count)]
        prefixed = n >= 20
        when += rng.choice([0, 1, 5, 40])
        if prefixed:
            index += count
        entries.append(
            {
                "messages": messages,
                "batched": batched,
                "index": index if prefixed else None,
                "broker_time": when,
                "publish_time": when + rng.randint(-500, 500),
                "batch_properties": {},
            }
        )
        for i, (_, props) in enumerate(messages):
            rows.append((index - count + 1 + i if prefixed else None, when if prefixed else None, props["colour"]))
    write_entries(path, NAME, entries, entries_per_ledger=37)
    return str(path), rows


def _key(row):
    return tuple(-1 if v is None else v for v in row)


def _query(spark, path, where):
    df = spark.read.format("magnetar").option("topic", "pushdown").load(path)
    return sorted(((r["index"], millis(r["broker_time"])) for r in df.where(where).collect()), key=_key)


def test_full_read_sees_every_message_with_nulls_for_unprefixed(spark, data):
    path, rows = data
    got = _query(spark, path, "true")
    assert got == sorted(((i, t) for i, t, _ in rows), key=_key)
    assert sum(1 for i, _ in got if i is None) == sum(1 for i, _, _ in rows if i is None) > 0


def test_randomized_time_and_index_filters_equal_a_full_read_and_filter(spark, data):
    path, rows = data
    rng = random.Random(11)
    indexes = [i for i, _, _ in rows if i is not None]
    times = [t for _, t, _ in rows if t is not None]
    ops = {
        ">=": lambda a, b: a >= b,
        ">": lambda a, b: a > b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        "=": lambda a, b: a == b,
    }
    for _ in range(12):
        clauses = []
        for column, values in (("index", indexes), ("broker_time", times)):
            if rng.random() < 0.7:
                op = rng.choice(list(ops))
                clauses.append((column, op, rng.choice(values) + rng.choice([-1, 0, 0, 1])))
        if not clauses:
            continue
        where = " and ".join(f"{c} {op} {v if c == 'index' else f'timestamp_millis({v})'}" for c, op, v in clauses)
        expected = sorted(
            (i, t)
            for i, t, _ in rows
            if i is not None and all(ops[op](i if c == "index" else t, v) for c, op, v in clauses)
        )
        assert _query(spark, path, where) == expected, where


def test_pushed_filters_show_in_explain(spark, data, capsys):
    path, _ = data
    df = spark.read.format("magnetar").option("topic", "pushdown").load(path) \
        .where("broker_time >= timestamp_millis(2000)")
    df.explain("formatted")
    plan = capsys.readouterr().out
    assert "PushedFilters: [GreaterThanOrEqual(broker_time,1970-01-01 " in plan


def test_properties_filter_option_keeps_matching_messages(spark, data):
    path, rows = data
    df = (
        spark.read.format("magnetar")
        .option("topic", "pushdown")
        .option("propertiesFilter", '{"colour": "red"}')
        .load(path)
    )
    assert df.count() == sum(1 for *_, colour in rows if colour == "red")


def test_time_search_reads_few_entries(data):
    path, _ = data
    options = parse_options({"path": path, "topic": "pushdown"})
    reader = MagnetarBatchReader(options)
    far = dt.datetime.fromtimestamp(10**6, dt.UTC)  # 10**9 ms: after every entry
    assert reader.pushed.accept(GreaterThanOrEqual(("broker_time",), far))
    (plan,) = reader.plan()
    assert plan.entries_to_read == 0
    assert plan.entries_searched <= 10


def test_partition_filter_prunes(data):
    path, _ = data
    pushed = PushedFilters()
    topics = StorageTopics(path)
    tp = TopicPartition("persistent://public/default/pushdown", -1)
    full = topics.plan(tp, Bounds(), 1 << 30, True)
    assert full.entries_to_read == 260 and full.entries_searched == 0
    pushed.partitions = {3}
    assert not pushed.keeps(tp)


def test_timestamp_literals_and_sub_millisecond_bounds_equal_a_full_read_and_filter(spark, data, capsys):
    path, rows = data
    df = spark.read.format("magnetar").option("topic", "pushdown").load(path)
    times = sorted({t for i, t, _ in rows if i is not None})
    middle = times[len(times) // 2]
    ops = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<": lambda a, b: a < b,
           "<=": lambda a, b: a <= b, "=": lambda a, b: a == b}
    for micros in (middle * 1000, middle * 1000 + 500):
        for op, compare in ops.items():
            where = f"broker_time {op} timestamp_micros({micros})"
            expected = sorted(i for i, t, _ in rows if i is not None and compare(t * 1000, micros))
            assert sorted(r["index"] for r in df.where(where).collect()) == expected, where
    when = dt.datetime.fromtimestamp(middle / 1000, dt.UTC)
    by_datetime = df.where(F.col("broker_time") >= when)
    by_string = df.where(F.col("broker_time") >= when.astimezone().replace(tzinfo=None).isoformat(" "))
    expected = sum(1 for i, t, _ in rows if i is not None and t >= middle)
    assert by_datetime.count() == by_string.count() == expected
    by_string.explain("formatted")
    assert "PushedFilters: [GreaterThanOrEqual(broker_time," in capsys.readouterr().out


def test_the_format_is_found_without_register_in_a_fresh_session(spark, data):
    """pyspark_magnetar.DefaultSource (SPARK-45917): no register() call, pushdown left off."""
    path, rows = data
    fresh = spark.newSession()
    assert fresh.conf.get("spark.sql.python.filterPushdown.enabled") == "false"
    df = fresh.read.format("magnetar").option("topic", "pushdown").load(path).where("index >= 100")
    assert df.count() == sum(1 for i, _, _ in rows if i is not None and i >= 100)
