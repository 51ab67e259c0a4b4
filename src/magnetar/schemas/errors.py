"""What the registry refuses, in the two kinds Pulsar tells apart: a definition that is not
well formed (the admin API's 422) and one the topic's strategy does not accept (409). Both
reach a client as the wire's IncompatibleSchema."""

from __future__ import annotations


class SchemaError(Exception):
    """Base of the registry's refusals."""


class InvalidSchemaError(SchemaError):
    """The definition does not parse as its type requires, or a request names no valid schema."""


class IncompatibleSchemaError(SchemaError):
    """The schema is well formed but the compatibility strategy (or a disabled auto-update)
    does not let it join the topic's history."""


class SchemaNotFoundError(SchemaError):
    """The topic has no schema (or not that version)."""
