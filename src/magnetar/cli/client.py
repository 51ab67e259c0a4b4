"""`magnetar client produce|consume`: pulsar-client's verbs and flags, on magnetar.client.

    magnetar client produce my-topic -m "hello,world" -n 10 -p origin=cli -k user-1
    magnetar client consume my-topic -s sub -p Earliest -n 0

Exit codes: 0 done, 1 the broker refused or could not be reached, 2 a usage error,
130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.cli import options
from magnetar.cli.pacing import Pacer
from magnetar.cli.parsing import UsageError, add_log_level, topic_name

if TYPE_CHECKING:
    from magnetar.client import Client

_RECEIVE_SLICE_MS = 500
"""A receive waits this long at most, so Ctrl-C is seen promptly while consuming forever."""


def register(commands: argparse._SubParsersAction) -> None:
    top = commands.add_parser("client", help="produce and consume messages (pulsar-client's verbs)",
                              description="Produce and consume messages, as pulsar-client does.")
    options.add_service_url(top, "--url")
    options.add_operation_timeout(top)
    options.add_security(top)
    verbs = top.add_subparsers(dest="verb", required=True, metavar="VERB")
    _register_produce(verbs)
    _register_consume(verbs)


def _register_produce(verbs: argparse._SubParsersAction) -> None:
    produce = verbs.add_parser("produce", help="send messages to a topic", description="Send messages to a topic.")
    produce.add_argument("topic", type=topic_name)
    produce.add_argument("-m", "--messages", action="append", default=[],
                         help="messages to send, split on the separator (repeatable)")
    produce.add_argument("-f", "--files", action="append", default=[],
                         help="comma-separated files whose contents are sent, one message each (repeatable)")
    produce.add_argument("-s", "--separator", default=",", help="splits the -m strings (default ',')")
    produce.add_argument("-n", "--num-produce", type=options.non_negative(), default=1,
                         help="how many times to send the messages (default 1)")
    produce.add_argument("-r", "--rate", type=options.non_negative(float), default=0.0,
                         help="messages per second; 0 sends as fast as possible")
    produce.add_argument("-p", "--properties", type=options.properties, action="append",
                         help="k1=v1,k2=v2 added to every message (repeatable)")
    produce.add_argument("-k", "--key", help="the partition key of every message")
    produce.add_argument("-db", "--disable-batching", action="store_true")
    produce.add_argument("-c", "--chunking", action="store_true", help="split messages larger than the limit")
    produce.add_argument("-z", "--compression", type=options.compression, default=options.COMPRESSIONS["NONE"])
    add_log_level(produce)
    produce.set_defaults(run=produce_messages)


def _register_consume(verbs: argparse._SubParsersAction) -> None:
    consume = verbs.add_parser("consume", help="receive and acknowledge messages",
                               description="Receive messages, print them and acknowledge them.")
    consume.add_argument("topic", type=topic_name, help="the topic (with --regex, a pattern of full topic names)")
    consume.add_argument("-s", "--subscription-name", required=True)
    consume.add_argument("-t", "--subscription-type", type=options.subscription_type,
                         default=options.SUBSCRIPTION_TYPES["Exclusive"],
                         help="Exclusive, Shared, Failover or Key_Shared")
    consume.add_argument("-p", "--subscription-position", type=options.subscription_position,
                         default=options.POSITIONS["Latest"], help="Latest or Earliest (a new subscription's start)")
    consume.add_argument("-n", "--num-messages", type=options.non_negative(), default=1,
                         help="how many messages to consume; 0 consumes until interrupted")
    consume.add_argument("-r", "--rate", type=options.non_negative(float), default=0.0)
    consume.add_argument("-q", "--queue-size", type=options.non_negative(), default=1000)
    consume.add_argument("--regex", action="store_true", help="the topic is a regular expression")
    consume.add_argument("--hex", action="store_true", help="print payloads in hexadecimal")
    consume.add_argument("--hide-content", action="store_true", help="do not print payloads")
    add_log_level(consume)
    consume.set_defaults(run=consume_messages)


def _payloads(args: argparse.Namespace) -> list[bytes]:
    messages = [part.encode() for text in args.messages for part in text.split(args.separator)]
    files = [Path(name) for text in args.files for name in text.split(",") if name]
    for path in files:
        try:
            messages.append(path.read_bytes())
        except OSError as error:
            raise UsageError(f"-f/--files: cannot read {path}: {error.strerror}") from None
    if not messages:
        raise UsageError("give the messages with -m/--messages or -f/--files")
    return messages


def produce_messages(args: argparse.Namespace) -> int:
    payloads = _payloads(args)
    from magnetar.client import Result  # noqa: PLC0415 (only the client verbs load the client)

    properties = options.merged(args.properties)
    failures: list[Result] = []
    counts = {"sent": 0, "acknowledged": 0}

    def sent(result: Result, _message_id: Any) -> None:
        if result == Result.Ok:
            counts["acknowledged"] += 1
        else:
            failures.append(result)

    def work(client: Client) -> int:
        producer = client.create_producer(
            args.topic, batching_enabled=not args.disable_batching and not args.chunking,
            chunking_enabled=args.chunking, compression_type=args.compression, block_if_queue_full=True)
        pacer = Pacer(args.rate)
        with _ctrl_c() as stop:
            for _ in range(args.num_produce):
                for payload in payloads:
                    if stop.is_set():
                        raise KeyboardInterrupt
                    pacer.wait()
                    producer.send_async(payload, sent, properties=properties, partition_key=args.key)
                    counts["sent"] += 1
        producer.flush()
        producer.close()
        if failures:
            print(f"magnetar client produce: {len(failures)} of {counts['sent']} messages failed: {failures[0].name}",
                  file=sys.stderr)
            return 1
        print(f"{counts['sent']} messages successfully produced")
        return 0

    def interrupted() -> None:
        """Ctrl-C: what was sent, and what the broker stored (acknowledged) by the time the
        client closed; the rest may or may not be stored."""
        unanswered = counts["sent"] - counts["acknowledged"] - len(failures)
        print(f"interrupted: {counts['sent']} messages sent, {counts['acknowledged']} acknowledged by the broker"
              + (f", {len(failures)} failed" if failures else "")
              + (f", {unanswered} not answered before the client closed" if unanswered else ""), flush=True)

    return _with_client(args, work, on_interrupt=interrupted)


def consume_messages(args: argparse.Namespace) -> int:
    from magnetar.client.errors import Timeout  # noqa: PLC0415 (only the client verbs load the client)

    consumed = 0

    def work(client: Client) -> int:
        nonlocal consumed
        topic = _topic_pattern(args.topic) if args.regex else args.topic
        new = not args.regex and _does_not_exist(args)
        consumer = client.subscribe(topic, args.subscription_name, consumer_type=args.subscription_type,
                                    initial_position=args.subscription_position, receiver_queue_size=args.queue_size)
        if new:
            print(f"{args.topic} did not exist: subscribing created it, a new topic, empty; waiting for its first "
                  "message (Ctrl-C to stop)", file=sys.stderr, flush=True)
        pacer = Pacer(args.rate)
        waiting_said = new
        with _ctrl_c() as stop:
            while args.num_messages == 0 or consumed < args.num_messages:
                if stop.is_set():
                    raise KeyboardInterrupt
                try:
                    message = consumer.receive(_RECEIVE_SLICE_MS)
                except Timeout:
                    if not waiting_said and not consumed:
                        print(f"waiting for messages on {args.topic} (subscription {args.subscription_name}), "
                              "Ctrl-C to stop", file=sys.stderr, flush=True)
                        waiting_said = True
                    continue
                pacer.wait()
                print("----- got message -----")
                print(_describe(message, args), flush=True)
                consumer.acknowledge(message)
                consumed += 1
        consumer.close()
        print(f"{consumed} messages successfully consumed")
        return 0

    return _with_client(args, work, on_interrupt=lambda: print(f"{consumed} messages consumed"))


@contextlib.contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """Ctrl-C sets the event, which the sending or receiving loop reads between messages,
    instead of raising KeyboardInterrupt wherever this thread is: raised inside the client's
    locks (a send waiting for room in the queue, an acknowledgement), it can leave one held
    (CPython's `with` and signals, bpo-29988) and hang the client's I/O thread, and the close
    that reports the counts with it."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _does_not_exist(args: argparse.Namespace) -> bool:
    """Whether the topic is missing, asked without creating it (PIP-344), so that consume can
    say it waits on a topic its own subscription creates. A broker that cannot answer so
    (older Pulsar: it creates or says 0 partitions) counts as having it."""
    from magnetar.client.connection import ClientConnection  # noqa: PLC0415 (only consume loads the client)
    from magnetar.client.errors import PulsarException, TopicNotFound  # noqa: PLC0415
    from magnetar.client.lookup import partitions_of  # noqa: PLC0415
    from magnetar.credentials.security import ClientSecurity  # noqa: PLC0415

    given = {name: value for name, value in options.security_arguments(args).items() if value is not None}
    try:
        with contextlib.closing(ClientConnection(args.service_url, args.operation_timeout,
                                                 ClientSecurity(**given))) as conn:
            partitions_of(conn, args.topic)
    except TopicNotFound:
        return True
    except PulsarException:  # unreachable, refused, ...: subscribe says so
        pass
    return False


def _topic_pattern(text: str) -> Any:
    try:
        return re.compile(text)
    except re.error as error:
        raise UsageError(f"--regex: {text!r} is not a regular expression: {error}") from None


def _describe(message: Any, args: argparse.Namespace) -> str:
    parts = [f"key:[{message.partition_key() or 'null'}]"]
    if message.properties():
        parts.append("properties:[" + ", ".join(f"{k}={v}" for k, v in sorted(message.properties().items())) + "]")
    if not args.hide_content:
        data = message.data()
        parts.append("content:" + (data.hex(" ") if args.hex else data.decode(errors="replace")))
    return ", ".join(parts)


def _with_client(args: argparse.Namespace, work: Any, on_interrupt: Any = None) -> int:
    """Runs `work(client)` and closes the client; parsing.run_command reports what it raises."""
    from magnetar.client import Client  # noqa: PLC0415 (only the client verbs load the client)

    client = None
    interrupted = False
    try:
        client = Client(args.service_url, operation_timeout_seconds=args.operation_timeout,
                        **options.security_arguments(args))
        return work(client)
    except KeyboardInterrupt:
        interrupted = True
        return 130
    finally:
        if client is not None:
            client.close()
        if interrupted and on_interrupt is not None:  # after close: what it settled counts
            on_interrupt()
