"""The compatibility check as a yes or no, for tests that compare verdicts with a table or
an oracle."""

from __future__ import annotations

from magnetar.schemas import CompatibilityStrategy, IncompatibleSchemaError, SchemaData
from magnetar.schemas.compatibility import check_against_history


def accepted(history: list[SchemaData], new: SchemaData, strategy: CompatibilityStrategy) -> bool:
    try:
        check_against_history(history, new, strategy)
    except IncompatibleSchemaError:
        return False
    return True
