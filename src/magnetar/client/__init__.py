"""magnetar.client: a Pulsar client with the official `pulsar-client` API and what it lacks.

`from magnetar.client import Client` is the blocking facade (the official API); the
asyncio core is `magnetar.client.aio`. Both speak only the protocol, so they work against
Apache Pulsar as well as magnetar. Extras: `Message.index()` / `broker_publish_time()`
(PIP-70) and `batched_filter_properties` on producers (PIP-191); end-to-end encryption
(`CryptoKeyReader`, `encryption_key=`) as the official clients lay it out. See docs/client.md.

`connection`, `lookup` and `raw_reader` are the blocking single-connection tools the
Spark source uses.

Layering: magnetar.client imports only what lies below it, `magnetar.wire`,
`magnetar.formats`, `magnetar.credentials` and `magnetar.schemas` (the registry's model, for
`magnetar.client.schema`) (and `magnetar.__version__`); never the
broker, storage, admin, spark or cli, so it runs against any Pulsar broker. Inside, highest
first: the blocking facade (`blocking`); the asyncio core (`aio`) and the single-connection
tools, which do not import each other; then what both share (receive_arrow's rows in
`columnar`, whole entries, batching, decoding and encoding entries, `Message`, `MessageId`,
errors, enums; `schema`, the official `pulsar.schema` API, beside the message ids).
The contract `client-layers` in pyproject.toml enforces it, annotation-only
imports included.
"""

import importlib
from typing import Any

from magnetar.client.aio.consumer_config import ConsumerBatchReceivePolicy
from magnetar.client.aio.letters import DeadLetterPolicy as ConsumerDeadLetterPolicy
from magnetar.client.blocking import Client, Consumer, Producer, Reader
from magnetar.client.crypto.context import EncryptionContext, EncryptionKey
from magnetar.client.crypto.key_reader import CryptoKeyReader, EncryptionKeyInfo
from magnetar.client.enums import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    InitialPosition,
    KeySharedMode,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    Result,
)
from magnetar.client.errors import *  # noqa: F403 (the official client exports its exceptions the same way)
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.credentials.authentication import AuthenticationBasic, AuthenticationTLS, AuthenticationToken


def __getattr__(name: str) -> Any:
    """`pulsar.schema.AvroSchema(...)` after `import magnetar.client as pulsar`, as the official
    package allows; the schema package loads on that first use."""
    if name == "schema":
        return importlib.import_module("magnetar.client.schema")
    raise AttributeError(f"module 'magnetar.client' has no attribute {name!r}")


__all__ = [
    "AuthenticationBasic",
    "AuthenticationTLS",
    "AuthenticationToken",
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerType",
    "CryptoKeyReader",
    "EncryptionContext",
    "EncryptionKey",
    "EncryptionKeyInfo",
    "InitialPosition",
    "KeySharedMode",
    "Message",
    "MessageId",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
]
