"""Settings read from Java properties text, each remembering where it was written.

Pulsar reads broker.conf with `java.util.Properties.load`, so a file that works
there uses its whole syntax: `key=value`, `key: value` and `key value`, `#` and `!`
comments, backslash continuations, `\\uXXXX` escapes. The parsing itself is
`javaproperties`, which follows that specification (imported when a file or text is
first read: a broker started without --config never needs it, nor the XML parser it
loads); this module adds what the broker needs on top, the file and line of every
setting, so that an error can point at the line to fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


class PropertiesError(ValueError):
    """Text that no Java properties reader would accept; the message names file and line."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One `key=value` as given, with where it came from (`broker.conf:12`, `-c`, ...)."""

    key: str
    value: str
    origin: str


_LINE_END = re.compile(r"\r\n|\r|\n")


def parse_properties(text: str, name: str) -> list[Setting]:
    """Every key-value element of `text` in order (a repeated key appears each time).

    Lines are counted over the raw source of every element, comments and blank
    lines included, so a setting continued over several lines reports the line it
    starts on.
    """
    import javaproperties  # noqa: PLC0415 (see the module's docstring)

    settings: list[Setting] = []
    line = 1
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                settings.append(Setting(element.key, element.value, f"{name}:{line}"))
            line += len(_LINE_END.findall(element.source))
    except javaproperties.InvalidUEscapeError as exc:
        raise PropertiesError(f"{name}:{line}: {exc}") from None
    return settings


def read_properties_file(path: Path) -> list[Setting]:
    """The settings of a properties file.

    Java's `Properties.load` reads bytes as ISO-8859-1; a file written in UTF-8 is
    read as UTF-8 here instead (what a Python user writes), and anything that is
    not UTF-8 falls back to ISO-8859-1 as in Java.
    """
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return parse_properties(text, str(path))
