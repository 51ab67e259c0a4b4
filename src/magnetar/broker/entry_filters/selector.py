"""Message selectors: SQL-92 conditions over message properties, as JMS selectors read.

    region = 'eu' AND version IN ('1', '2')
    price * 1.2 BETWEEN 10 AND 20 OR name LIKE 'a\\_%' ESCAPE '\\'
    NOT (tier IS NULL) AND urgent = TRUE

A selector is parsed once (lark, an LALR grammar) and compiled into nested Python
closures, so judging an entry is a few calls over a dict, never a parse. Properties are
strings, as Pulsar's are, and take the type of what they meet: compared with (or added
to) a number they are read as numbers, compared with TRUE/FALSE as booleans ('true' or
'false', any case), else as text; a value that does not read as that type is unknown.
A missing property is NULL, and NULL follows SQL's three-valued logic: it matches nothing
but `IS NULL`, `NOT` of unknown stays unknown, unknown AND false is false, unknown OR true
is true; an entry is selected only when the whole condition is true.

Literals of different types in one comparison ('a' < 1), ordering booleans (TRUE < x) and
a dangling or multi-character ESCAPE are refused when the selector is compiled, with a
message saying so, rather than failing on every entry. A name may contain '-' and '.'
(Pulsar property names do), so subtraction needs spaces: `n - 1`, not `n-1`.
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
#: A compiled operand: its type (one of the four below) and how to get its value.
Operand = tuple[str, Value]
STRING, NUMBER, BOOLEAN, PROPERTY = "string", "number", "boolean", "property"

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*
?and_expr: not_expr (_AND not_expr)*
?not_expr: _NOT not_expr -> negation
         | predicate
?predicate: comparable COMPARATOR comparable    -> comparison
          | sum BETWEEN sum _AND sum            -> between
          | prop IN "(" literal ("," literal)* ")" -> membership
          | prop LIKE STRING [_ESCAPE STRING]   -> like
          | prop _IS [NOT] _NULL                -> null_test
          | "(" or_expr ")"
          | boolean                             -> constant
?comparable: sum | boolean
?sum: product | sum ADDITIVE product            -> arithmetic
?product: unary | product MULTIPLICATIVE unary  -> arithmetic
?unary: ADDITIVE unary                          -> signed
      | atom
?atom: prop | literal | "(" sum ")"
prop: IDENTIFIER
?literal: STRING -> string
        | NUMBER -> number
boolean: TRUE | FALSE

COMPARATOR: "=" | "<>" | "!=" | "<=" | ">=" | "<" | ">"
ADDITIVE: "+" | "-"
MULTIPLICATIVE: "*" | "/"
_OR.2: /or\b/i
_AND.2: /and\b/i
_NOT.2: /not\b/i
NOT.2: /not\b/i
BETWEEN.2: /(not\s+)?between\b/i
IN.2: /(not\s+)?in\b/i
LIKE.2: /(not\s+)?like\b/i
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
#: A property reads as a number when it is written as a selector's number literal is.
_NUMBER_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_NO_PROPERTIES: Properties = {}


class SelectorError(ValueError):
    """A selector that does not parse or mixes types; the message says where or what."""


def _number(text: str | None) -> float | None:
    if text is None or _NUMBER_TEXT.fullmatch(text) is None:
        return None
    return float(text)


def _boolean(text: str | None) -> bool | None:
    lowered = text.lower() if text is not None else None
    return True if lowered == "true" else False if lowered == "false" else None


_READERS: dict[str, Callable[[str | None], Any]] = {NUMBER: _number, BOOLEAN: _boolean}


def _as(operand: Operand, kind: str) -> Value:
    """The operand's value as `kind`: a property is read as that type, a literal is one."""
    operand_kind, getter = operand
    reader = _READERS.get(kind)
    if operand_kind == PROPERTY and reader is not None:
        return lambda props: reader(getter(props))
    return getter


def _common_kind(operands: list[Operand], where: str) -> str:
    """The type the operands are compared as; literals of two types are an error."""
    kinds = sorted({kind for kind, _ in operands if kind != PROPERTY})
    if len(kinds) > 1:
        raise SelectorError(f"{where} compares a {kinds[0]} with a {kinds[1]}")
    return kinds[0] if kinds else STRING


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
_EQUALITY = frozenset({"=", "<>", "!="})


def _divide(a: float, b: float) -> float | None:
    return a / b if b else None


_ARITHMETIC: dict[str, Callable[[float, float], float | None]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": _divide,
}


def _at(token: Token) -> str:
    return f"'{token!s}' at line {token.line}, column {token.column}"


def _numeric(operand: Operand, token: Token) -> Value:
    """An arithmetic operand: a number, or a property read as one."""
    if operand[0] not in (NUMBER, PROPERTY):
        raise SelectorError(f"{_at(token)} needs numbers, not a {operand[0]}")
    return _as(operand, NUMBER)


class _Compiler(Transformer):
    """Parse tree -> closures: operands compile to (type, getter), conditions to Condition."""

    def string(self, items: list[Token]) -> Operand:
        text = items[0][1:-1].replace("''", "'")
        return STRING, lambda _props: text

    def number(self, items: list[Token]) -> Operand:
        value = float(items[0])
        return NUMBER, lambda _props: value

    def boolean(self, items: list[Token]) -> Operand:
        value = items[0].type == "TRUE"
        return BOOLEAN, lambda _props: value

    def prop(self, items: list[Token]) -> Operand:
        name = str(items[0])
        if name.startswith('"'):
            name = name[1:-1].replace('""', '"')
        elif name.upper() in _KEYWORDS:
            raise SelectorError(f"{_at(items[0])} is a keyword, not a property name (quote it: \"name\")")
        return PROPERTY, lambda props: props.get(name)

    def constant(self, items: list[Operand]) -> Condition:
        return items[0][1]

    def signed(self, items: list[Any]) -> Operand:
        sign, operand = items
        value = _numeric(operand, sign)
        if sign == "+":
            return NUMBER, value

        def negative(props: Properties) -> float | None:
            v = value(props)
            return None if v is None else -v
        return NUMBER, negative

    def arithmetic(self, items: list[Any]) -> Operand:
        left, op, right = items
        get_left, get_right, apply = _numeric(left, op), _numeric(right, op), _ARITHMETIC[str(op)]

        def computed(props: Properties) -> float | None:
            a, b = get_left(props), get_right(props)
            return None if a is None or b is None else apply(a, b)
        return NUMBER, computed

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
        kind = _common_kind([left, right], _at(op))
        if kind == BOOLEAN and op not in _EQUALITY:
            raise SelectorError(f"{_at(op)} orders booleans: only =, <> and != compare them")
        compare = _OPERATORS[str(op)]
        get_left, get_right = _as(left, kind), _as(right, kind)

        def compared(props: Properties) -> bool | None:
            a, b = get_left(props), get_right(props)
            return None if a is None or b is None else compare(a, b)
        return compared

    def between(self, items: list[Any]) -> Condition:
        value, operator, low, high = items
        negate = _negated(operator)
        kind = _common_kind([value, low, high], "BETWEEN")
        get_value, get_low, get_high = (_as(x, kind) for x in (value, low, high))

        def within(props: Properties) -> bool | None:
            # v BETWEEN lo AND hi is lo <= v AND v <= hi, three-valued: one side false is enough.
            v, lo, hi = get_value(props), get_low(props), get_high(props)
            above = None if v is None or lo is None else lo <= v
            below = None if v is None or hi is None else v <= hi
            inside = False if above is False or below is False else None if above is None or below is None else True
            return None if inside is None else inside != negate
        return within

    def membership(self, items: list[Any]) -> Condition:
        value, operator, *choices = items
        negate = _negated(operator)
        texts = {getter(_NO_PROPERTIES) for kind, getter in choices if kind == STRING}
        numbers = {getter(_NO_PROPERTIES) for kind, getter in choices if kind == NUMBER}
        get_text = value[1]

        def member(props: Properties) -> bool | None:
            text = get_text(props)
            if text is None:
                return None
            found = text in texts or (bool(numbers) and _number(text) in numbers)
            return found != negate
        return member

    def like(self, items: list[Any]) -> Condition:
        value, operator, pattern, escape = items
        negate = _negated(operator)
        regex = _like_regex(_unquote(pattern), _escape_character(escape))
        get_value = value[1]

        def matches(props: Properties) -> bool | None:
            v = get_value(props)
            return None if v is None else (regex.fullmatch(v) is not None) != negate
        return matches

    def null_test(self, items: list[Any]) -> Condition:
        value, negate = items
        get_value = value[1]
        return lambda props: (get_value(props) is None) != bool(negate)


def _negated(operator: Token) -> bool:
    """Whether BETWEEN, IN or LIKE came as NOT BETWEEN, NOT IN or NOT LIKE (one token each,
    so that `name NOT` is not read as the start of either before the parser sees which)."""
    return operator[:3].upper() == "NOT"


def _unquote(token: Token) -> str:
    return token[1:-1].replace("''", "'")


def _escape_character(token: Token | None) -> str | None:
    if token is None:
        return None
    escape = _unquote(token)
    if len(escape) != 1:
        raise SelectorError(f"ESCAPE {_at(token)} must be one character")
    return escape


def _like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """LIKE's pattern as a regex: % any run, _ any one character, the escape character
    making the next one literal (it may not end the pattern)."""
    parts: list[str] = []
    chars = iter(pattern)
    for char in chars:
        if escape is not None and char == escape:
            escaped = next(chars, None)
            if escaped is None:
                raise SelectorError(f"LIKE pattern {pattern!r} ends with its escape character {escape!r}")
            parts.append(re.escape(escaped))
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
    return condition  # type: ignore[no-any-return]


def matches(text: str, properties: Properties) -> bool:
    """Whether `properties` satisfy the selector (unknown counts as no)."""
    return compile_selector(text)(properties) is True
