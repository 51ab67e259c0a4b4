"""Where the broker's settings come from, in which order, and what start-up says of them.

Precedence, lowest first: defaults (the broker's, then those the caller adds, such as
`magnetar standalone`'s), the `--config` file, `PULSAR_PREFIX_<key>`
environment variables, `-c key=value`, then the dedicated flags (`--port`, ...).
The environment sits where Pulsar's container images put it: their start script
writes `PULSAR_PREFIX_` variables into the file, so they beat the file, and a
command line beats both because it is the most local statement of intent.

A key that neither magnetar nor any Pulsar release knows is refused on the command
line but only warned about (with its line and the nearest real keys) in the file and
the environment. Pulsar itself keeps such keys without a word, for the plugins it
loads (protocol handlers, authentication providers, interceptors) read their own keys
from the same file, so files that start Pulsar carry them; refusing would turn a
working Pulsar configuration into a broker that does not start. A `-c` argument is
typed for magnetar in the moment, so a typo there is a mistake to stop at.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from magnetar.broker.config.properties import PropertiesError, Setting, read_properties_file
from magnetar.broker.config.secrets import MASK, is_secret
from magnetar.broker.config.service_configuration import (
    Check,
    ConfigError,
    ServiceConfiguration,
    apply_settings,
    is_known_key,
    unknown_key,
)

log = logging.getLogger("magnetar.config")

ENVIRONMENT_PREFIX = "PULSAR_PREFIX_"


@dataclass(slots=True)
class LoadedConfiguration:
    """A configuration with the origin of each setting and the keys it ignored."""

    config: ServiceConfiguration
    settings: dict[str, Setting]
    ignored: list[str]
    unknown: list[Setting] = field(default_factory=list)

    def log_summary(self) -> None:
        """A warning per unknown key, one naming every ignored Pulsar key, then the keys in effect.

        The Pulsar keys go in one line, so an operator sees the whole picture in a few
        lines instead of a warning per key, and a log search for a key name finds where
        it was set. An unknown key is likely a typo, so it gets its own line and origin.
        """
        for setting in self.unknown:
            log.warning("%s; ignored", unknown_key(setting))
        if self.ignored:
            log.warning("%d Pulsar keys that magnetar does not implement are ignored: %s",
                        len(self.ignored), ", ".join(self.ignored))
        changed = non_default_settings(self.config)
        if not changed:
            log.info("configuration: every key at its default")
            return
        described = (f"{key}={displayed_value(key, value)} [{self._origin(key)}]" for key, value in changed.items())
        log.info("configuration (keys not at their defaults): %s", ", ".join(described))

    def _origin(self, key: str) -> str:
        setting = self.settings.get(key)
        return setting.origin if setting else "default"


def non_default_settings(config: ServiceConfiguration) -> dict[str, object]:
    """The keys whose value differs from the default, in declaration order."""
    defaults = ServiceConfiguration()
    return {item.name: getattr(config, item.name) for item in fields(ServiceConfiguration)
            if getattr(config, item.name) != getattr(defaults, item.name)}


def displayed_value(key: str, value: object) -> str:
    """A value as the start-up log shows it: secrets masked, lists and switches as written."""
    if is_secret(key, value):
        return MASK
    if value is None:
        return "(off)"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def file_settings(path: Path) -> list[Setting]:
    """The settings of a broker.conf-style file, each with its file and line."""
    try:
        return read_properties_file(path)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except PropertiesError as exc:
        raise ConfigError(str(exc)) from None


def environment_settings(environ: Mapping[str, str]) -> list[Setting]:
    """`PULSAR_PREFIX_<key>=value` variables, as Pulsar's container images read them."""
    return [Setting(name[len(ENVIRONMENT_PREFIX):], value, f"environment ({name})")
            for name, value in sorted(environ.items()) if name.startswith(ENVIRONMENT_PREFIX)]


def override_settings(items: Iterable[str]) -> list[Setting]:
    """`-c key=value` arguments (a value may itself contain `=`)."""
    settings = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-c {item!r}: expected key=value")
        settings.append(Setting(key.strip(), value, "-c"))
    return settings


def load_configuration(
    config_file: Path | None = None,
    overrides: Iterable[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
    flags: Iterable[Setting] = (),
    defaults: Iterable[Setting] = (),
    check: Check | None = None,
) -> LoadedConfiguration:
    """Standalone defaults, the file, the environment, `-c` overrides and flags, later ones winning.

    Unknown keys of the file and the environment are set aside (see the module's
    docstring); those of `-c` make apply_settings raise. `check` runs after the
    configuration's own validation: a broker's start-up passes the checks of its
    features (service.config_checks.check_features).
    """
    lenient = [*(file_settings(config_file) if config_file is not None else ()), *environment_settings(environ or {})]
    unknown = [setting for setting in lenient if not is_known_key(setting.key)]
    settings = [*defaults, *(setting for setting in lenient if is_known_key(setting.key)),
                *override_settings(overrides), *flags]
    config = ServiceConfiguration()
    ignored = apply_settings(config, settings, check)
    return LoadedConfiguration(
        config=config,
        settings={setting.key: setting for setting in settings},
        ignored=sorted({setting.key for setting in ignored}),
        unknown=unknown,
    )
