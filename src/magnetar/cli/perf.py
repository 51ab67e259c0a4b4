"""`magnetar perf produce|consume`: pulsar-perf's main flags on magnetar.client.

    magnetar perf produce my-topic -r 10000 -s 1024 -time 60
    magnetar perf consume my-topic -ss sub -st Shared -m 1000000

A rate line every `--report-interval` seconds (10, as pulsar-perf) and, at the end, the
aggregated rate and latency percentiles; `--json` prints the summary as JSON for scripts.
Producer latency is send to receipt; consumer latency is publish time to receipt.
Exit codes: 0 done, 1 the broker refused or could not be reached, 2 a usage error,
130 interrupted (after printing the summary).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.cli import options
from magnetar.cli.pacing import Pacer
from magnetar.cli.parsing import add_log_level, topic_name
from magnetar.cli.perf_meter import Meter, line

if TYPE_CHECKING:
    from magnetar.client import Client, Result

_RECEIVE_SLICE_MS = 200


def register(commands: argparse._SubParsersAction) -> None:
    top = commands.add_parser("perf", help="measure produce and consume rates (pulsar-perf's verbs)",
                              description="Measure produce and consume rates and latencies, as pulsar-perf does.")
    verbs = top.add_subparsers(dest="verb", required=True, metavar="VERB")
    _register_produce(verbs.add_parser("produce", help="produce at a rate and report latencies"))
    _register_consume(verbs.add_parser("consume", help="consume and report rates and end-to-end latencies"))


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", type=topic_name)
    options.add_service_url(parser, "-u", "--service-url")
    options.add_operation_timeout(parser)
    options.add_security(parser)
    parser.add_argument("-time", "--test-duration", type=options.non_negative(float), default=0.0,
                        help="stop after this many seconds; 0 runs until the count or Ctrl-C")
    parser.add_argument("--report-interval", type=options.non_negative(float), default=10.0,
                        help="seconds between rate lines (default 10)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_log_level(parser)


def _register_produce(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("-r", "--rate", type=options.non_negative(float), default=100.0,
                        help="messages per second (default 100); 0 is as fast as possible")
    parser.add_argument("-s", "--size", type=options.non_negative(), default=1024, help="payload bytes")
    parser.add_argument("-m", "--num-messages", type=options.non_negative(), default=0,
                        help="messages in total; 0 runs until the duration or Ctrl-C")
    parser.add_argument("-n", "--num-producers", type=options.non_negative(), default=1)
    parser.add_argument("-o", "--max-outstanding", type=options.non_negative(), default=1000,
                        help="unreceipted messages per producer before sending blocks")
    parser.add_argument("-db", "--disable-batching", action="store_true")
    parser.add_argument("-bm", "--batch-max-messages", type=options.non_negative(), default=1000)
    parser.add_argument("-bb", "--batch-max-bytes", type=options.non_negative(), default=4 * 1024 * 1024)
    parser.add_argument("-b", "--batch-time-window", type=options.non_negative(float), default=1.0,
                        help="milliseconds a batch waits to fill")
    parser.add_argument("-z", "--compression", type=options.compression, default=options.COMPRESSIONS["NONE"])
    parser.set_defaults(run=produce)


def _register_consume(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("-ss", "--subscriptions", default="sub", help="subscription name (default sub)")
    parser.add_argument("-st", "--subscription-type", type=options.subscription_type,
                        default=options.SUBSCRIPTION_TYPES["Exclusive"])
    parser.add_argument("-sp", "--subscription-position", type=options.subscription_position,
                        default=options.POSITIONS["Latest"])
    parser.add_argument("-m", "--num-messages", type=options.non_negative(), default=0,
                        help="messages in total; 0 runs until the duration or Ctrl-C")
    parser.add_argument("-q", "--receiver-queue-size", type=options.non_negative(), default=1000)
    parser.add_argument("-r", "--rate", type=options.non_negative(float), default=0.0,
                        help="simulate a slow consumer (messages per second)")
    parser.set_defaults(run=consume)


class _Run:
    """The loop shared by both verbs: stop conditions, periodic lines, the summary."""

    def __init__(self, args: argparse.Namespace, verb: str) -> None:
        self.args, self.verb, self.meter = args, verb, Meter()
        self._deadline = time.monotonic() + args.test_duration if args.test_duration else None
        self._next_report = time.monotonic() + args.report_interval if args.report_interval else None

    def going(self, done: int) -> bool:
        now = time.monotonic()
        if self._next_report is not None and now >= self._next_report:
            print(line(self.verb, self.meter.take_window()), flush=True)
            self._next_report = now + self.args.report_interval
        if self.args.num_messages and done >= self.args.num_messages:
            return False
        return self._deadline is None or now < self._deadline

    def summary(self) -> None:
        total = self.meter.total()
        if self.args.json:
            print(json.dumps({"verb": self.verb, **total.as_dict()}))
        else:
            print(f"Aggregated: {total.messages:,} messages in {total.seconds:.1f} s --- "
                  + line(self.verb, total), flush=True)


def produce(args: argparse.Namespace) -> int:
    from magnetar.client import Result  # noqa: PLC0415 (only the perf verbs load the client)

    run = _Run(args, "Produced")
    payload = os.urandom(args.size)

    def work(client: Client) -> None:
        producers = [client.create_producer(
            args.topic, batching_enabled=not args.disable_batching, batching_max_messages=args.batch_max_messages,
            batching_max_allowed_size_in_bytes=args.batch_max_bytes,
            batching_max_publish_delay_ms=max(1, round(args.batch_time_window)), compression_type=args.compression,
            max_pending_messages=max(1, args.max_outstanding), block_if_queue_full=True)
            for _ in range(max(1, args.num_producers))]
        pacer, sent = Pacer(args.rate), 0
        while run.going(sent):
            pacer.wait()
            producers[sent % len(producers)].send_async(payload, _receipt(run.meter, len(payload), Result.Ok))
            sent += 1
        for producer in producers:
            producer.flush()

    return _with_client(args, run, work)


def _receipt(meter: Meter, size: int, ok: Result) -> Callable[[Result, Any], None]:
    started = time.monotonic_ns()

    def done(result: Result, _message_id: Any) -> None:
        if result == ok:
            meter.record(size, (time.monotonic_ns() - started) // 1000)
        else:
            meter.fail()
    return done


def consume(args: argparse.Namespace) -> int:
    from magnetar.client.errors import Timeout  # noqa: PLC0415 (only the perf verbs load the client)

    run = _Run(args, "Consumed")

    def work(client: Client) -> None:
        consumer = client.subscribe(args.topic, args.subscriptions, consumer_type=args.subscription_type,
                                    initial_position=args.subscription_position,
                                    receiver_queue_size=args.receiver_queue_size)
        pacer = Pacer(args.rate)
        while run.going(run.meter.total_messages):
            try:
                message = consumer.receive(_RECEIVE_SLICE_MS)
            except Timeout:
                continue
            pacer.wait()
            consumer.acknowledge(message)
            run.meter.record(len(message.data()), (time.time_ns() // 1_000_000 - message.publish_timestamp()) * 1000)
        consumer.close()

    return _with_client(args, run, work)


def _with_client(args: argparse.Namespace, run: _Run, work: Callable[[Client], None]) -> int:
    """Runs `work(client)`, then the summary (also when interrupted); parsing.run_command
    reports what it raises."""
    from magnetar.client import Client  # noqa: PLC0415 (only the perf verbs load the client)

    security = options.security_arguments(args)
    client = None
    try:
        client = Client(args.service_url, operation_timeout_seconds=args.operation_timeout, **security)
        work(client)
        code = 0
    except KeyboardInterrupt:
        code = 130
    finally:
        if client is not None:
            client.close()
    run.summary()
    return code
