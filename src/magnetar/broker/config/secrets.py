"""Which settings hold secrets, and how an answer or a log shows them: masked.

One rule for every place that shows settings (the start-up log, the admin API's runtime
configuration, a cluster's data), so a secret hidden in one is not shown by another. A
secret is a text value under a name that says password, secret, credential, token or key,
or a client's authentication parameters: switches and numbers under such names
(`topicCompactionRetainNullKey`, `tokenAllowedClockSkewSeconds`) say nothing secret and are
shown.
"""

from __future__ import annotations

import re

MASK = "****"
"""What a secret value is shown as; an empty one stays empty (it tells that none is set)."""

_SECRET_NAME = re.compile(r"password|secret|credential|parameters|params$|token$|key$|basicAuthConf", re.IGNORECASE)


def is_secret(key: str, value: object) -> bool:
    return isinstance(value, str) and value != "" and _SECRET_NAME.search(key) is not None


def masked(values: dict[str, object]) -> dict[str, object]:
    """`values` with each secret replaced by MASK."""
    return {key: MASK if is_secret(key, value) else value for key, value in values.items()}
