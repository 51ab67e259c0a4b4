"""The schema registry's model and rules, shared by the broker, magnetar.client and the Spark
source: schema types and versions as Pulsar numbers them, definitions parsed and validated
with real parsers (the `avro` package, protobuf descriptors), the nine compatibility
strategies, and the per-topic version lists in the metadata store.

Layering: beside magnetar.formats and magnetar.credentials (none imports another), under
magnetar.broker and magnetar.client, over storage; imports only magnetar.storage (the
metadata store) and magnetar.wire (topic names). No asyncio and no network: callers bring
their own concurrency. Enforced by import-linter (pyproject.toml).
"""

from magnetar.schemas.errors import IncompatibleSchemaError, InvalidSchemaError, SchemaError, SchemaNotFoundError
from magnetar.schemas.model import (
    CompatibilityStrategy,
    SchemaData,
    SchemaType,
    version_bytes,
    version_from_bytes,
)
from magnetar.schemas.registry import SchemaRegistry, SchemaVersion, schema_id

__all__ = [
    "CompatibilityStrategy",
    "IncompatibleSchemaError",
    "InvalidSchemaError",
    "SchemaData",
    "SchemaError",
    "SchemaNotFoundError",
    "SchemaRegistry",
    "SchemaType",
    "SchemaVersion",
    "schema_id",
    "version_bytes",
    "version_from_bytes",
]
