"""The Context a function's `process(input, context)` receives: the official SDK's
`pulsar.Context` interface, backed by the instance's client, stats and state."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pulsar

from magnetar.functions import loader
from magnetar.functions.config import FunctionConfig
from magnetar.functions.state_client import StateClient
from magnetar.functions.stats import InstanceStats

PUBLISH_PRODUCER = {"block_if_queue_full": True, "batching_enabled": True, "batching_max_publish_delay_ms": 10}
"""Producers of `context.publish`, batching as Pulsar's Python instance sets them."""


class Identity:
    """Who the instance is: the function's config and the worker-given ids."""

    def __init__(self, config: FunctionConfig, instance_id: int, function_id: str, function_version: str) -> None:
        self.config = config
        self.instance_id = instance_id
        self.function_id = function_id
        self.function_version = function_version


class InstanceContext(pulsar.Context):
    def __init__(self, identity: Identity, client: pulsar.Client, consumer: Any, stats: InstanceStats,
                 state: StateClient, logger: logging.Logger) -> None:
        self._identity = identity
        self._config = identity.config
        self._client = client
        self._consumer = consumer
        self._stats = stats
        self._state = state
        self._logger = logger
        self._producers: dict[str, pulsar.Producer] = {}
        self._serdes: dict[str, Any] = {}
        self._message: Any = None
        self._topic = ""

    def set_message(self, message: Any, topic: str) -> None:
        self._message = message
        self._topic = topic

    # -- the current message
    def get_message_id(self) -> Any:
        return self._message.message_id()

    def get_message_key(self) -> str | None:
        return self._message.partition_key() or None

    def get_partition_key(self) -> str | None:
        return self._message.partition_key() or None

    def get_ordering_key(self) -> Any:
        return self._message.ordering_key()

    def get_message_eventtime(self) -> int:
        return self._message.event_timestamp()

    def get_message_properties(self) -> dict[str, str]:
        return self._message.properties()

    def get_current_message_topic_name(self) -> str:
        return self._topic

    # -- identity and configuration
    def get_function_tenant(self) -> str:
        return self._config.tenant

    def get_function_namespace(self) -> str:
        return self._config.namespace

    def get_function_name(self) -> str:
        return self._config.name

    def get_function_id(self) -> str:
        return self._identity.function_id

    def get_instance_id(self) -> int:
        return self._identity.instance_id

    def get_function_version(self) -> str:
        return self._identity.function_version

    def get_logger(self) -> logging.Logger:
        return self._logger

    def get_user_config_value(self, key: str) -> Any:
        return self._config.userConfig.get(key)

    def get_user_config_map(self) -> dict[str, Any]:
        return dict(self._config.userConfig)

    def get_secret(self, secret_name: str) -> Any:
        """Pulsar's default provider for the process runtime hands the configured value over
        as it is (clear text)."""
        return self._config.secrets.get(secret_name)

    def get_input_topics(self) -> list[str]:
        return list(self._config.input_topics)

    def get_output_topic(self) -> str | None:
        return self._config.output

    def get_output_serde_class_name(self) -> str | None:
        return self._config.outputSerdeClassName

    # -- output and acknowledgement
    def publish(self, topic_name: str, message: Any, serde_class_name: str = loader.DEFAULT_SERDE,
                properties: dict[str, str] | None = None, compression_type: Any = None,
                callback: Callable[[Any, Any], None] | None = None, message_conf: dict[str, Any] | None = None) -> None:
        """Send to any topic; `message_conf` goes to the producer's send_async as it is, so
        `deliver_after`, `deliver_at`, `partition_key`, `event_timestamp` ... work."""
        producer = self._producers.get(topic_name)
        if producer is None:
            options = dict(PUBLISH_PRODUCER)
            if compression_type is not None:
                options["compression_type"] = compression_type
            producer = self._producers[topic_name] = self._client.create_producer(topic_name, **options)
        serde = self._serdes.get(serde_class_name)
        if serde is None:
            serde = self._serdes[serde_class_name] = loader.serde(serde_class_name)
        source = self._message.message_id() if self._message is not None else None

        def done(result: Any, message_id: Any) -> None:
            if result != pulsar.Result.Ok:
                self._stats.on_system_exception(f"publish to {topic_name} failed ({result}) for input {source}")
            if callback is not None:
                callback(result, message_id)

        options = {**({"properties": properties} if properties is not None else {}), **(message_conf or {}),
                   **self._send_options()}
        producer.send_async(bytes(serde.serialize(message)), done, **options)

    def _send_options(self) -> dict[str, Any]:
        """What a publish is sent with besides the caller's options: nothing here; the
        message's transaction under EFFECTIVELY_ONCE on transactions (txn_instance)."""
        return {}

    def ack(self, msgid: Any, topic: str | None = None) -> None:
        self._consumer.acknowledge(msgid)

    def record_metric(self, metric_name: str, metric_value: float) -> None:
        self._stats.record_metric(metric_name, metric_value)

    # -- state
    def incr_counter(self, key: str, amount: int) -> int:
        return self._state.incr(key, amount)

    def get_counter(self, key: str) -> int:
        return self._state.counter(key)

    def del_counter(self, key: str) -> None:
        self._state.delete(key)

    def put_state(self, key: str, value: bytes | str) -> None:
        self._state.put(key, value.encode() if isinstance(value, str) else bytes(value))

    def get_state(self, key: str) -> bytes | None:
        return self._state.get(key)

    def flush(self) -> None:
        for producer in self._producers.values():
            producer.flush()

    def close(self) -> None:
        for producer in self._producers.values():
            producer.close()
