"""`magnetar compact TOPIC`: compact a topic and wait for the end, with a progress bar.

Without `--spark` the broker compacts (what `magnetar admin topics compact --wait` does).
With `--spark` a Spark job (`magnetar.spark.compact`, local[2] unless `--master` says
otherwise) reads the topic from `--data-dir` and, when `--admin-url` is given, the
broker there adopts the result; without it no broker may be running on the data dir.
"""

from __future__ import annotations

import argparse
import os
import sys

from magnetar.admin_client import AdminClient
from magnetar.cli.admin import DEFAULT_ADMIN_URL, compact_and_wait, progress_bar
from magnetar.cli.parsing import UsageError, add_log_level, topic_name


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("compact", help="compact a topic (the broker, or a Spark job with --spark)",
                                 description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    parser.add_argument("topic", type=topic_name, help="persistent://tenant/namespace/topic (or a short name)")
    parser.add_argument("--spark", action="store_true", help="run the compaction as a Spark job")
    parser.add_argument("--data-dir", help="with --spark: the broker's data directory, which the job reads")
    parser.add_argument("--admin-url", default=os.environ.get("MAGNETAR_ADMIN_URL"),
                        help="the broker's HTTP URL (default $MAGNETAR_ADMIN_URL; without --spark, "
                             f"{DEFAULT_ADMIN_URL}); with --spark, the broker that adopts the result")
    parser.add_argument("--master", default="local[2]", help="with --spark: the Spark master (default local[2])")
    add_log_level(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """A refusal, a bad value or a compaction not put in force is reported by parsing.run_command."""
    message = _with_spark(args) if args.spark else compact_and_wait(
        AdminClient(args.admin_url or DEFAULT_ADMIN_URL), argparse.Namespace(topic=args.topic, wait=True))
    print(message)
    return 0


def _with_spark(args: argparse.Namespace) -> str:
    if not args.data_dir:
        raise UsageError("--spark needs --data-dir (the broker's data directory, which the job reads)")
    try:
        from pyspark.sql import SparkSession  # noqa: PLC0415 (the [spark] extra is optional)

        from magnetar.spark.compaction import compact  # noqa: PLC0415
        from magnetar.spark.storage_reader import StorageTopics  # noqa: PLC0415
    except ImportError as exc:
        raise UsageError(f"--spark needs the [spark] extra (pip install 'magnetar[spark]'): {exc}") from None
    try:  # a bad directory or topic fails before Spark starts
        StorageTopics(args.data_dir).partitions(args.topic)
    except ValueError as exc:
        raise UsageError(str(exc).replace("option 'path'", "--data-dir")) from None
    spark = (SparkSession.builder.master(args.master).appName(f"magnetar compact {args.topic}")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        results = compact(spark, args.topic, args.admin_url, args.data_dir, progress=progress_bar)
    finally:
        print(file=sys.stderr)  # ends the progress bar's line
    done = [r for r in results if r.horizon is not None]
    if not done:
        return "Nothing new to compact"
    keys = sum(r.keys for r in done)
    seconds = max(r.seconds for r in done)
    return f"Topic compacted by Spark: {len(done)} partition(s), {keys} keys, {seconds:.1f}s"
