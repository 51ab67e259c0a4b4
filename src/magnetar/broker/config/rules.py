"""What a configuration key's value must be, stated on its field as Pulsar states it with
`@FieldContext(minValue=..., doc=...)`: `key(default, rule, doc)` puts a Rule and a line of
what the key is for in the dataclass field's metadata, and `ServiceConfiguration.validate`
asks every field's rule. The words of each refusal name the key, and are what users see."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class Rule:
    """A check of one key's value alone; `validate` asks every field's."""

    def problem(self, name: str, value: Any) -> str | None:
        """What is wrong with `value` for key `name`, in words naming the key; None: nothing."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Positive(Rule):
    def problem(self, name: str, value: Any) -> str | None:
        return None if value > 0 else f"{name} must be positive, not {value}"


@dataclass(frozen=True, slots=True)
class NotNegative(Rule):
    zero: str = ""
    """What 0 means, where it is a value of its own ("no limit", "never")."""

    def problem(self, name: str, value: Any) -> str | None:
        zero = f"0 ({self.zero})" if self.zero else "0"
        return None if value >= 0 else f"{name} must be {zero} or positive, not {value}"


@dataclass(frozen=True, slots=True)
class OneOf(Rule):
    choices: tuple[str, ...]
    fold_case: bool = False

    def problem(self, name: str, value: Any) -> str | None:
        if (value.upper() if self.fold_case else value) in self.choices:
            return None
        if len(self.choices) == 2:
            return f"{name} must be {self.choices[0]!r} or {self.choices[1]!r}, not {value!r}"
        return f"{name} must be one of {', '.join(self.choices)}, not {value!r}"


@dataclass(frozen=True, slots=True)
class NotEmpty(Rule):
    """A name the broker puts on the wire (a cluster's, a prefix): empty would name nothing."""

    def problem(self, name: str, value: Any) -> str | None:
        return None if value.strip() else f"{name} must be a name, not empty"


@dataclass(frozen=True, slots=True)
class Port(Rule):
    """A port to listen on; empty (None) turns the listener off, as in Pulsar."""

    def problem(self, name: str, value: Any) -> str | None:
        if value is None or 0 <= value <= 65535:
            return None
        return f"{name} must be a port number (0-65535) or empty (off), not {value}"


def key(default: Any, rule: Rule, doc: str) -> Any:
    """A field with what its value must be and a line saying what it is for."""
    return field(default=default, metadata={"rule": rule, "doc": doc})


POSITIVE = Positive()
NOT_EMPTY = NotEmpty()
PORT = Port()
