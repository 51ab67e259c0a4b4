"""The main of a function instance's process (Pulsar's process runtime: one process an
instance): load the user's code, subscribe to the inputs, call `process` for each message
and keep the processing guarantee the config names.

Started by magnetar.functions.bootstrap (`run`); a handoff with `check` only loads the code,
so the worker can refuse code that does not import before deploying it.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

import pulsar

from magnetar.functions import loader, package
from magnetar.functions.config import FunctionConfig
from magnetar.functions.context import Identity, InstanceContext
from magnetar.functions.log_topic import LogTopicHandler
from magnetar.functions.state_client import StateClient
from magnetar.functions.stats import InstanceStats

log = logging.getLogger("magnetar.functions.instance")
EXIT_BAD_CODE = 2
EXIT_TIMEOUT = 3
EXIT_RETRY_IN_ORDER = 4
NEGATIVE_ACK_DELAY_MS = 1000
"""A message a function failed on comes back after a second (the client's default, a
minute, would stall a dead-lettering function for retries times a minute)."""
OUTPUT_PRODUCER = {"block_if_queue_full": True, "batching_enabled": True, "batching_max_publish_delay_ms": 1,
                   "max_pending_messages": 100000}
_PARTITION = re.compile(r"-partition-\d+\Z")


def sequence_id(message_id: Any) -> int:
    """The output's sequence id for EFFECTIVELY_ONCE: the input's position, increasing with it
    on one input partition, so the broker's deduplication drops an output a restarted instance
    sends again. Ledger id in the top bits (below 2**23), then entry id (below 2**26: ledgers
    roll over long before), then batch index (below 2**14); Pulsar's Java runtime packs ledger
    and entry alone, which repeats an id within a batch."""
    batch = max(message_id.batch_index(), 0)
    return (message_id.ledger_id() << 40) | (message_id.entry_id() << 14) | batch


def full_topic(name: str) -> str:
    """`in` -> `persistent://public/default/in`, the form messages carry."""
    if "://" in name:
        return name
    parts = name.split("/")
    return f"persistent://public/default/{name}" if len(parts) == 1 else f"persistent://{name}"


def output_options(message: Any, topic: str) -> dict[str, Any]:
    """The output's properties naming its input (as Pulsar's instances set them) and its key."""
    properties = {"__pfn_input_topic__": topic,
                  "__pfn_input_msg_id__": base64.b64encode(message.message_id().serialize()).decode()}
    options: dict[str, Any] = {"properties": properties}
    if key := message.partition_key():
        options["partition_key"] = key
    return options


class Stopped(Exception):
    """The worker asked the instance to stop (the client reports it as Interrupted when the
    signal came during a receive)."""


class Instance:
    context_class = InstanceContext
    stop_errors: tuple[type[BaseException], ...] = (Stopped, pulsar.Interrupted, pulsar.AlreadyClosed)
    """What ends `run` quietly: a stop, or the client closed under it."""

    def __init__(self, identity: Identity, client: pulsar.Client, function: loader.UserFunction,
                 stats: InstanceStats, state: StateClient, logger: logging.Logger) -> None:
        self.identity = identity
        self.config = config = identity.config
        self.client = client
        self.function = function
        self.stats = stats
        self.at_most_once = config.processingGuarantees == "ATMOST_ONCE"
        self.effectively_once = config.processingGuarantees == "EFFECTIVELY_ONCE"
        self.serdes = {full_topic(topic): loader.serde(config.customSerdeInputs.get(topic)) for topic in
                       config.input_topics}
        self.default_serde = loader.serde(None)
        self._serde_of_topic: dict[str, Any] = {}
        self.output_serde = loader.serde(config.outputSerdeClassName) if config.output else None
        self.consumer = self.client.subscribe(self._inputs(), config.subscription, **self._consumer_options())
        self.context = self.context_class(identity, client, self.consumer, stats, state, logger)
        self.producers: dict[str, pulsar.Producer] = {}
        self.watchdog = Watchdog(config.timeoutMs, self._timed_out)

    @classmethod
    def connect(cls, handoff: dict[str, Any]) -> Any:
        """The client, acting with the credential the worker issued (None: authentication off)."""
        credential = handoff.get("credential")
        return pulsar.Client(handoff["serviceUrl"], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
                             authentication=pulsar.AuthenticationToken(credential) if credential else None)

    def _inputs(self) -> Any:
        config = self.config
        return re.compile(config.topicsPattern) if config.topicsPattern else config.input_topics

    def _consumer_options(self) -> dict[str, Any]:
        config = self.config
        options: dict[str, Any] = {
            "consumer_type": pulsar.ConsumerType.Failover if config.failover else pulsar.ConsumerType.Shared,
            "initial_position": pulsar.InitialPosition.Earliest if config.subscriptionPosition == "Earliest"
            else pulsar.InitialPosition.Latest,
            "negative_ack_redelivery_delay_ms": NEGATIVE_ACK_DELAY_MS,
            "consumer_name": f"{config.fqfn}:{self.identity.instance_id}",
        }
        if config.timeoutMs:
            options["unacked_messages_timeout_ms"] = max(config.timeoutMs, 10000)
        if config.maxMessageRetries is not None:
            options["dead_letter_policy"] = pulsar.ConsumerDeadLetterPolicy(
                max_redeliver_count=config.maxMessageRetries,
                dead_letter_topic=config.dead_letter_topic)
        return options

    def run(self) -> None:
        """Until SIGTERM: a blocking receive (the client wakes for signals), since a receive
        with a timeout costs the loop a good part of its CPU a message."""
        self.stats.write(force=True)
        self.stats.write_periodically()
        try:
            while True:
                self.handle(self._next())
        except self.stop_errors:
            return

    def _next(self) -> Any:
        """What `handle` takes next: a message."""
        return self.consumer.receive()

    def handle(self, message: Any) -> None:
        self.stats.on_received()
        auto_ack = self.config.autoAck
        if self.at_most_once and auto_ack:
            self.consumer.acknowledge(message)
        topic = message.topic_name()
        start = time.monotonic()
        try:
            value = self._input_serde(topic).deserialize(message.data())
            self.context.set_message(message, topic)
            with self.watchdog:
                output = self.function.call(value, self.context)
        except Exception as error:
            log.exception("process() raised on message %s of %s", message.message_id(), topic)
            self._failed(message, error)
            return
        except BaseException as error:  # sys.exit() in user code: recorded, then the process ends
            self.stats.on_user_exception(error)
            self.stats.write(force=True)
            raise
        self.stats.on_processed((time.monotonic() - start) * 1000)
        self.emit(output, message, topic)

    def _input_serde(self, topic: str) -> Any:
        """The serde of a message's topic (a partition's is its topic's), looked up once a topic."""
        serde = self._serde_of_topic.get(topic)
        if serde is None:
            serde = self._serde_of_topic[topic] = self.serdes.get(_PARTITION.sub("", topic), self.default_serde)
        return serde

    def _failed(self, message: Any, error: BaseException | str, *, user: bool = True) -> None:
        """A message the function (`user`) or its output failed on comes back: negatively
        acknowledged, except under ATMOST_ONCE (acknowledged already) and EFFECTIVELY_ONCE,
        where a redelivery alone would come after later messages and its output, with a lower
        sequence id, would be dropped as a duplicate: there the process ends, and the next
        instance resumes from the last cumulative acknowledgement, in order."""
        if user:
            self.stats.on_user_exception(error if isinstance(error, BaseException) else RuntimeError(error))
        else:
            self.stats.on_system_exception(error)
        if self.effectively_once:
            log.error("EFFECTIVELY_ONCE: message %s failed (%s); the instance restarts to process it again in order",
                      message.message_id(), error)
            self.stats.write(force=True)
            os._exit(EXIT_RETRY_IN_ORDER)
        if not self.at_most_once:
            self.consumer.negative_acknowledge(message)

    def _acknowledge(self, message: Any) -> None:
        """Individually; cumulatively under EFFECTIVELY_ONCE (outputs are receipted in input
        order on a partition's producer, so everything before is stored too)."""
        if self.effectively_once:
            self.consumer.acknowledge_cumulative(message)
        else:
            self.consumer.acknowledge(message)

    def emit(self, output: Any, message: Any, topic: str) -> None:
        ack_after = not self.at_most_once and self.config.autoAck
        if output is None or self.output_serde is None:
            if ack_after:
                if self.effectively_once and topic in self.producers:
                    self.producers[topic].flush()  # a cumulative ack must not pass outputs in flight
                self._acknowledge(message)
            return
        try:
            data = bytes(self.output_serde.serialize(output))
        except Exception as error:
            self._failed(message, error)
            return
        message_id = message.message_id()
        options = output_options(message, topic)
        try:
            producer = self._producer(topic)
        except pulsar.PulsarException as error:  # the output refused (its role's permission revoked, ...)
            self._failed(message, f"output to {self.config.output} failed: {error}", user=False)
            return
        if self.effectively_once:
            options["sequence_id"] = sequence_id(message_id)

        def done(result: Any, _message_id: Any) -> None:
            if result != pulsar.Result.Ok:
                self._failed(message, f"output to {self.config.output} failed: {result}", user=False)
            elif ack_after:
                self._acknowledge(message)

        producer.send_async(data, done, **options)

    def _producer(self, input_topic: str) -> pulsar.Producer:
        """One output producer; under EFFECTIVELY_ONCE one per input partition, named after it,
        so each carries its own increasing sequence ids and the broker remembers the last."""
        key = input_topic if self.effectively_once else ""
        producer = self.producers.get(key)
        if producer is None:
            assert self.config.output is not None
            if self.effectively_once:
                name = f"{self.config.fqfn}-{input_topic.rsplit('://', maxsplit=1)[-1]}".replace("/", "-")
                producer = self.client.create_producer(self.config.output, producer_name=name, batching_enabled=False,
                                                       block_if_queue_full=True, send_timeout_millis=0)
            else:
                producer = self.client.create_producer(self.config.output, **OUTPUT_PRODUCER)
            self.producers[key] = producer
        return producer

    def _timed_out(self, elapsed_ms: float) -> None:
        """process() outlived --timeout-ms: a thread cannot be stopped, so the process ends and
        its worker starts another; the message, never acknowledged, comes back."""
        self.restart(EXIT_TIMEOUT, TimeoutError(f"process() did not return within timeoutMs={self.config.timeoutMs} "
                                                f"({elapsed_ms:.0f} ms); the instance restarts"))

    def restart(self, exit_code: int, error: BaseException, user: bool = True) -> NoReturn:
        """End the process after logging and counting `error`: its worker starts another."""
        log.error("%s", error)
        if user:
            self.stats.on_user_exception(error)
        else:
            self.stats.on_system_exception(error)
        self.stats.write(force=True)
        logging.shutdown()
        os._exit(exit_code)

    def stop(self) -> None:
        """From the worker's SIGTERM: inside process(), leave at once; elsewhere end the loop
        (raised where the main thread is, a receive most of the time). Either way a message
        not acknowledged yet comes back to the next instance."""
        if self.watchdog.busy:
            self.stats.write(force=True)
            os._exit(0)
        raise Stopped

    def close(self) -> None:
        for producer in self.producers.values():
            producer.flush()
        self.context.flush()
        self.stats.write(force=True)
        self.client.close()


class Watchdog:
    """Calls `on_timeout` from its own thread when one process() call outlives `timeout_ms`."""

    def __init__(self, timeout_ms: int | None, on_timeout: Any) -> None:
        self.timeout_ms = timeout_ms
        self.on_timeout = on_timeout
        self._started: float | None = None
        if timeout_ms:
            threading.Thread(target=self._watch, name="watchdog", daemon=True).start()

    @property
    def busy(self) -> bool:
        return self._started is not None

    def __enter__(self) -> None:
        self._started = time.monotonic()

    def __exit__(self, *_exc: object) -> None:
        self._started = None

    def _watch(self) -> None:
        assert self.timeout_ms is not None
        period = min(self.timeout_ms / 4000, 0.1)
        while True:
            time.sleep(period)
            started = self._started
            if started is not None and (elapsed := (time.monotonic() - started) * 1000) > self.timeout_ms:
                self.on_timeout(elapsed)


def run(handoff: dict[str, Any], code: Path, runtime: type[Instance] = Instance) -> int:
    """The instance, once magnetar.functions.bootstrap has confined its process and read what
    the worker handed over: its config, ids, where the broker is, the credential it acts with
    (as the role that deployed the function), the pipe its stats go to. `runtime` is the
    Instance class that consumes (magnetar.functions.txn_instance has the transactional one)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = FunctionConfig.from_json(handoff["config"])
    stats_fd = handoff.get("statsFd")
    if stats_fd is not None:
        os.set_inheritable(stats_fd, False)  # a process the function starts keeps none of the worker's pipes
    stats = InstanceStats(open(stats_fd, "wb") if stats_fd is not None else None,  # noqa: SIM115  (the process's)
                          handoff.get("carried"))
    try:
        serdes = [name for name in {*config.customSerdeInputs.values(), config.outputSerdeClassName}
                  if name and not loader.builtin_serde(name)]
        package.check_names(code, config.className, serdes)
        loader.add_code_to_path(code, Path.cwd() / "code")
        function = loader.UserFunction.load(config.className)
        for name in {*config.customSerdeInputs.values(), config.outputSerdeClassName}:
            loader.serde(name)
    except (loader.CodeError, package.PackageError) as error:
        print(f"function code error: {error}", file=sys.stderr)
        stats.on_user_exception(error)
        stats.write(force=True)
        return EXIT_BAD_CODE
    if handoff.get("check"):
        return 0
    identity = Identity(config, handoff["instanceId"], handoff["functionId"], handoff["functionVersion"])
    credential = handoff.get("credential")
    client = runtime.connect(handoff)
    logger = logging.getLogger(f"function.{config.fqfn}")
    if config.logTopic:
        log_topic = LogTopicHandler(client, config.logTopic, config.fqfn, identity.instance_id)
        logger.addHandler(log_topic)
        log_topic.tee_output()
    state = StateClient(handoff["stateUrl"], config.fqfn,
                        {"Authorization": f"Bearer {credential}"} if credential else None)
    instance = runtime(identity, client, function, stats, state, logger)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: instance.stop())
    log.info("instance %d of %s running (%s, %s)", identity.instance_id, config.fqfn, config.processingGuarantees,
             "Failover" if config.failover else "Shared")
    try:
        instance.run()
    finally:
        instance.close()
    return 0
