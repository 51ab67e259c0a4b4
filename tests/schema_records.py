"""The records schema tests evolve, declared with either client's schema module (the official
`pulsar.schema` or `magnetar.client.schema`, which have the same API)."""

from __future__ import annotations

from types import ModuleType
from typing import Any


def user_records(schema: ModuleType) -> tuple[Any, Any, Any]:
    """(User, UserV2, UserBad): v1; v1 plus an optional field with a default (BACKWARD, FORWARD
    and FULL compatible with it); `age` turned from int into a required string (taken by no
    strategy but ALWAYS_COMPATIBLE)."""
    user = type("User", (schema.Record,), {"name": schema.String(), "age": schema.Integer()})
    user_v2 = type("UserV2", (schema.Record,), {"name": schema.String(), "age": schema.Integer(),
                                                "score": schema.Double(required_default=True)})
    user_bad = type("UserBad", (schema.Record,), {"name": schema.String(), "age": schema.String(required=True)})
    return user, user_v2, user_bad
