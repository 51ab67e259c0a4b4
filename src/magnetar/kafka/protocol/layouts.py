"""Building kio's message values for whichever version a client speaks.

A response's fields come and go with its version (Metadata v10 adds topic ids, Produce
v8 record errors); each kio class is one version's layout. `build` takes every field
the broker knows and keeps those the class has, so a handler writes one response and
every version gets its share: fields a version lacks are dropped, and those a version
has but the handler did not give keep their defaults from Kafka's definitions.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from functools import cache
from types import ModuleType
from typing import Any

from magnetar.kafka.protocol.messages import response_schema


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def response_module(api_key: int, version: int) -> ModuleType:
    """The kio module of an API's response at `version` (its nested classes live there)."""
    return sys.modules[response_schema(api_key, version).__module__]


def build(module: ModuleType, class_name: str, /, **values: Any) -> Any:
    """An instance of `module.class_name` from the `values` its version has."""
    cls = getattr(module, class_name)
    names = _field_names(cls)
    return cls(**{key: value for key, value in values.items() if key in names})
