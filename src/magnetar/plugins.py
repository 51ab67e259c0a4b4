"""Finding a plugin by the name someone wrote, and deciding whose names may load what.

Entry filters (PIP-105), compaction services (PIP-429), payload processors (PIP-96),
authentication providers: each is a `PluginGroup`, and a name in it is a built-in (the
package's own, found even when its entry points are not installed, as in a source
checkout on PYTHONPATH), an entry point of the group, or `package.module:Attribute` (as
Pulsar names classes in its NAR descriptors).

Who wrote the name decides how far it may reach:
- the operator (the broker's configuration: `entryFilterNames`,
  `authenticationProviders`, `compactionServiceFactoryClassName`) owns the process, so
  `PluginGroup.load` takes all three forms;
- anyone else (a namespace or topic policy set over REST, an option of a Spark query, a
  client's `payload_processor` name) gets an `AllowList`: the built-ins, the installed
  entry points and the names the operator's configuration gave, fixed when the list is
  built. Any other name is refused before anything is imported, as Pulsar lets policies
  name only the filters the operator installed.

Layering: the bottom layer, under magnetar.wire: imports no other magnetar module, so
everything that loads plugins (broker, formats, admin, spark) may import it. Enforced by
import-linter (pyproject.toml).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any


class PluginError(ValueError):
    """A name that designates no plugin, or one its writer may not use; the message says which."""


@dataclass(frozen=True)
class PluginGroup:
    kind: str
    """What the plugins are called in messages ("entry filter")."""
    group: str
    """The entry-point group they register under."""
    builtins: Mapping[str, str]
    """name -> `package.module:Attribute` of the package's own plugins."""

    def load(self, name: str) -> Any:
        """The object an operator's `name` designates (not instantiated); PluginError naming
        the known names when nothing answers to it."""
        target = self.builtins.get(name)
        if target is None:
            for plugin in installed_entry_points(self.group):
                if plugin.name == name:
                    return plugin.load()
            if ":" not in name:
                raise PluginError(f"no {self.kind} named {name!r} (known: {self._known()}; plugins register "
                                  f"under {self.group!r}, or name one as package.module:Class)")
            target = name
        module_name, _, attribute = target.partition(":")
        try:
            return getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"cannot load {self.kind} {name!r}: {exc}") from None

    def installed(self) -> frozenset[str]:
        """The built-ins and the entry points of the group: what an operator installed."""
        return frozenset({*self.builtins, *(plugin.name for plugin in installed_entry_points(self.group))} - {""})

    def allow_list(self, configured: Iterable[str] = (), hint: str = "") -> AllowList:
        """What names from outside the operator's hands may load: see the module docstring.
        `hint` ends the refusal, naming where else an allowed name comes from."""
        return AllowList(self, frozenset(configured), hint)

    def _known(self) -> str:
        return ", ".join(sorted(self.installed())) or "none"


class AllowList:
    """The names of one group that users other than the operator may use. Built-ins and
    configured names answer without looking further; the installed entry points are read
    once, on the first other name, so nothing is scanned or imported at start-up."""

    def __init__(self, group: PluginGroup, configured: frozenset[str], hint: str = "") -> None:
        self.group = group
        self.configured = configured
        self._hint = hint

    @cached_property
    def names(self) -> frozenset[str]:
        return self.group.installed() | self.configured

    def __contains__(self, name: object) -> bool:
        return name in self.group.builtins or name in self.configured or name in self.names

    def load(self, name: str) -> Any:
        """The plugin `name` designates, if it is one this list allows; PluginError otherwise,
        with nothing imported."""
        if name not in self:
            group, installed = self.group, ", ".join(sorted(self.names)) or "none"
            raise PluginError(f"no {group.kind} named {name!r} is installed (installed: {installed}): a name here must "
                              f"be a built-in or an entry point of {group.group!r}{self._hint}; nothing else is "
                              f"imported")
        return self.group.load(name)


def installed_entry_points(group: str) -> Iterable[Any]:
    """Installed plugins of a group. importlib.metadata (~3 MB, it scans every installed
    distribution) loads only when a plugin is looked up, not with every module naming a group."""
    from importlib.metadata import entry_points  # noqa: PLC0415

    return entry_points(group=group)
