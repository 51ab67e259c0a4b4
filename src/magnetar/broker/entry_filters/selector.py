"""Message selectors: SQL-92 conditions over message properties, as JMS selectors read.

    region = 'eu' AND version IN ('1', '2')
    price BETWEEN 10 AND 20 OR name LIKE 'a\\_%' ESCAPE '\\'
    NOT (tier IS NULL)

A selector is parsed once (lark, an LALR grammar) and compiled into nested Python
closures, so judging an entry is a few calls over a dict, never a parse. Properties are
strings, as Pulsar's are: a comparison with a number literal reads the property as a
number (no number, no match), one with a string literal compares text. A missing
property is NULL, and NULL follows SQL's three-valued logic: it matches nothing but
`IS NULL`, and `NOT` of unknown stays unknown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Transformer, UnexpectedInput
from lark.exceptions import VisitError

Properties = Mapping[str, str]
#: A compiled condition: True, False, or None for SQL's unknown.
Condition = Callable[[Properties], bool | None]
Value = Callable[[Properties], Any]

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*
?and_expr: not_expr (_AND not_expr)*
?not_expr: _NOT not_expr -> negation
         | predicate
?predicate: operand COMPARATOR operand          -> comparison
          | operand [NOT] _BETWEEN operand _AND operand -> between
          | operand [NOT] _IN "(" literal ("," literal)* ")" -> membership
          | operand [NOT] _LIKE STRING [_ESCAPE STRING] -> like
          | operand _IS [NOT] _NULL             -> null_test
          | "(" or_expr ")"
          | TRUE -> true
          | FALSE -> false
?operand: IDENTIFIER -> prop
        | literal
?literal: STRING -> string
        | NUMBER -> number

COMPARATOR: "=" | "<>" | "!=" | "<=" | ">=" | "<" | ">"
_OR.2: /or\b/i
_AND.2: /and\b/i
_NOT.2: /not\b/i
NOT.2: /not\b/i
_BETWEEN.2: /between\b/i
_IN.2: /in\b/i
_LIKE.2: /like\b/i
_ESCAPE.2: /escape\b/i
_IS.2: /is\b/i
_NULL.2: /null\b/i
TRUE.2: /true\b/i
FALSE.2: /false\b/i
IDENTIFIER: /[A-Za-z_$][A-Za-z0-9_$.\-]*/ | /"([^"]|"")+"/
STRING: /'([^']|'')*'/
NUMBER: /[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?/
%ignore /\s+/
"""

_KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE"})
_PARSER = Lark(_GRAMMAR, parser="lalr", propagate_positions=True)


class SelectorError(ValueError):
    """A selector that does not parse; the message names the line and column."""


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _and(left: Condition, right: Condition) -> Condition:
    def both(props: Properties) -> bool | None:
        a = left(props)
        if a is False:
            return False
        b = right(props)
        if b is False:
            return False
        return True if a and b else None
    return both


def _or(left: Condition, right: Condition) -> Condition:
    def either(props: Properties) -> bool | None:
        a = left(props)
        if a is True:
            return True
        b = right(props)
        if b is True:
            return True
        return False if a is False and b is False else None
    return either


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b, "<>": lambda a, b: a != b, "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


class _Compiler(Transformer):
    """Parse tree -> closures. Operands compile to (kind, getter): kind says how to compare."""

    def string(self, items: list[Token]) -> tuple[str, Value]:
        text = items[0][1:-1].replace("''", "'")
        return "string", lambda _props: text

    def number(self, items: list[Token]) -> tuple[str, Value]:
        value = float(items[0])
        return "number", lambda _props: value

    def prop(self, items: list[Token]) -> tuple[str, Value]:
        name = str(items[0])
        if name.startswith('"'):
            name = name[1:-1].replace('""', '"')
        elif name.upper() in _KEYWORDS:
            raise SelectorError(f"{name} at line {items[0].line}, column {items[0].column} is a keyword, not a "
                                'property name (quote it: "name")')
        return "property", lambda props: props.get(name)

    def true(self, _items: list[Token]) -> Condition:
        return lambda _props: True

    def false(self, _items: list[Token]) -> Condition:
        return lambda _props: False

    def or_expr(self, items: list[Condition]) -> Condition:
        condition = items[0]
        for other in items[1:]:
            condition = _or(condition, other)
        return condition

    def and_expr(self, items: list[Condition]) -> Condition:
        condition = items[0]
        for other in items[1:]:
            condition = _and(condition, other)
        return condition

    def negation(self, items: list[Condition]) -> Condition:
        inner = items[0]

        def negated(props: Properties) -> bool | None:
            value = inner(props)
            return None if value is None else not value
        return negated

    def comparison(self, items: list[Any]) -> Condition:
        left, op, right = items
        compare = _OPERATORS[str(op)]
        numeric = "number" in (left[0], right[0])
        get_left, get_right = _coerced(left, numeric), _coerced(right, numeric)

        def compared(props: Properties) -> bool | None:
            a, b = get_left(props), get_right(props)
            return None if a is None or b is None else compare(a, b)
        return compared

    def between(self, items: list[Any]) -> Condition:
        value, negate, low, high = items
        numeric = "number" in (value[0], low[0], high[0])
        get_value, get_low, get_high = (_coerced(x, numeric) for x in (value, low, high))

        def within(props: Properties) -> bool | None:
            v, lo, hi = get_value(props), get_low(props), get_high(props)
            if v is None or lo is None or hi is None:
                return None
            return (lo <= v <= hi) != bool(negate)
        return within

    def membership(self, items: list[Any]) -> Condition:
        value, negate, *choices = items
        texts = {str(getter({})) if kind == "string" else _number_text(getter({})) for kind, getter in choices}
        get_value = value[1]

        def member(props: Properties) -> bool | None:
            v = get_value(props)
            return None if v is None else (str(v) in texts) != bool(negate)
        return member

    def like(self, items: list[Any]) -> Condition:
        value, negate, pattern, escape = items
        regex = _like_regex(pattern[1:-1].replace("''", "'"), escape[1:-1] if escape is not None else None)
        get_value = value[1]

        def matches(props: Properties) -> bool | None:
            v = get_value(props)
            return None if v is None else (regex.fullmatch(str(v)) is not None) != bool(negate)
        return matches

    def null_test(self, items: list[Any]) -> Condition:
        value, negate = items
        get_value = value[1]
        return lambda props: (get_value(props) is None) != bool(negate)


def _coerced(operand: tuple[str, Value], numeric: bool) -> Value:
    kind, getter = operand
    if numeric and kind == "property":
        return lambda props: _number(getter(props))
    return getter


def _number_text(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    parts: list[str] = []
    chars = iter(pattern)
    for char in chars:
        if escape is not None and char == escape:
            parts.append(re.escape(next(chars, "")))
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


@lru_cache(maxsize=1024)
def compile_selector(text: str) -> Condition:
    """Parse and compile `text` once (cached): raises SelectorError naming the position."""
    try:
        tree = _PARSER.parse(text)
    except UnexpectedInput as exc:
        raise SelectorError(f"selector does not parse at line {exc.line}, column {exc.column}: "
                            f"{exc.get_context(text).strip()!r}") from None
    try:
        condition = _Compiler().transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, SelectorError):
            raise exc.orig_exc from None
        raise
    if isinstance(condition, tuple):  # a bare operand is no condition
        raise SelectorError(f"selector {text!r} is a value, not a condition")
    return condition  # type: ignore[no-any-return]


def matches(text: str, properties: Properties) -> bool:
    """Whether `properties` satisfy the selector (unknown counts as no)."""
    return compile_selector(text)(properties) is True
