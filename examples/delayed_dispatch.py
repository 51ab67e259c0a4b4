"""The Delayed Dispatch Function PIP-26's discussion preferred ("the Pulsar Function way"):
republish each message of an input topic to the output topic, due at a time its producer
put in a property, so that producers which cannot set `deliver_at` (other clients, Kafka
writers, scripts) still get delayed delivery on the output topic's Shared consumers.

Deploy on a magnetar standalone (or Apache Pulsar):

    magnetar admin functions create --name delayed-dispatch \\
        --py examples/delayed_dispatch.py --classname delayed_dispatch.DelayedDispatch \\
        --inputs orders-delayed --output orders --auto-ack false \\
        --custom-serde-inputs '{"orders-delayed": "delayed_dispatch.BytesSerDe"}' \\
        --user-config '{"delay_property": "delay_ms", "deliver_at_property": "deliver_at"}'

A message with property `delay_ms=5000` reaches `orders` five seconds after it passes
through; `deliver_at=<epoch ms>` names the instant itself; a message with neither goes
straight through. Key, properties and event time are kept. The input is acknowledged only
once the output is stored (manual acks), so a crash re-dispatches instead of losing it.
"""

from datetime import timedelta
from typing import Any

import pulsar
from pulsar import Function


class BytesSerDe:
    """Payloads as they are: the default serde would turn b"007" into the int 7."""

    def serialize(self, value: bytes) -> bytes:
        return bytes(value)

    def deserialize(self, data: bytes) -> bytes:
        return data


class DelayedDispatch(Function):
    def process(self, payload: bytes, context: pulsar.Context) -> None:
        properties = dict(context.get_message_properties())
        conf: dict[str, Any] = {}
        at = properties.pop(context.get_user_config_value("deliver_at_property") or "deliver_at", None)
        delay = properties.pop(context.get_user_config_value("delay_property") or "delay_ms", None)
        if at is not None:
            conf["deliver_at"] = int(at)
        elif delay is not None:
            conf["deliver_after"] = timedelta(milliseconds=int(delay))
        if context.get_message_key():
            conf["partition_key"] = context.get_message_key()
        if context.get_message_eventtime():
            conf["event_timestamp"] = context.get_message_eventtime()
        message_id, topic = context.get_message_id(), context.get_current_message_topic_name()

        def stored(result: pulsar.Result, _output_id: Any) -> None:
            if result == pulsar.Result.Ok:
                context.ack(message_id, topic)
            else:
                context.get_logger().error("dispatch of %s failed: %s; it comes back", message_id, result)

        context.publish(context.get_output_topic(), payload, serde_class_name="delayed_dispatch.BytesSerDe",
                        properties=properties, callback=stored, message_conf=conf)
