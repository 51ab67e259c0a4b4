"""Finding a plugin by the name a user wrote: entry filters (PIP-105), compaction services
(PIP-429) and payload processors (PIP-96) are all named the same three ways, so one
function finds them all.

A name is a built-in (the package's own, found even when its entry points are not
installed, as in a source checkout on PYTHONPATH), an entry point of the plugin's group,
or `package.module:Attribute` (as Pulsar names classes in its NAR descriptors).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any


def load_plugin(kind: str, group: str, name: str, builtins: Mapping[str, str]) -> Any:
    """The object `name` designates (not instantiated); ValueError naming `kind` and the
    known names when nothing answers to it."""
    target = builtins.get(name)
    if target is None:
        for plugin in entry_points(group=group):
            if plugin.name == name:
                return plugin.load()
        if ":" not in name:
            known = sorted({*builtins, *(plugin.name for plugin in entry_points(group=group))} - {""})
            raise ValueError(f"no {kind} named {name!r} (known: {', '.join(known) or 'none'}; plugins register "
                             f"under {group!r}, or name one as package.module:Class)")
        target = name
    module_name, _, attribute = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {kind} {name!r}: {exc}") from None
