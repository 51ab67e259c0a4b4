"""A function's configuration, as pulsar-admin and the REST API spell it (Pulsar's
FunctionConfig JSON), with Pulsar's defaults and checks made where they can be known: at
create time, not in a crash loop later."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from magnetar.wire.topic_name import InvalidTopicNameError, check_entity_name

GUARANTEES = ("ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE")
POSITIONS = ("Latest", "Earliest")
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
CODE_SUFFIXES = (".py", ".zip", ".whl")
DEFAULT_SCRATCH_BYTES = 256 * 1024 * 1024
"""An instance's writable space when the config's `resources` names no `disk` (Pulsar's is
10 GB, a Kubernetes volume; here it is memory: a tmpfs in the sandbox)."""


class ConfigError(ValueError):
    """A configuration the worker refuses; the message names the field."""


@dataclass
class FunctionConfig:
    """The fields of Pulsar's FunctionConfig that a Python function uses. `py` is the name the
    uploaded code had (a display name: the worker stores it under a name of its own)."""

    tenant: str = "public"
    namespace: str = "default"
    name: str = ""
    className: str = ""
    inputs: list[str] = field(default_factory=list)
    topicsPattern: str | None = None
    customSerdeInputs: dict[str, str] = field(default_factory=dict)
    output: str | None = None
    outputSerdeClassName: str | None = None
    logTopic: str | None = None
    processingGuarantees: str = "ATLEAST_ONCE"
    retainOrdering: bool = False
    userConfig: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, Any] = field(default_factory=dict)
    runtime: str = "PYTHON"
    autoAck: bool = True
    maxMessageRetries: int | None = None
    deadLetterTopic: str | None = None
    subName: str | None = None
    subscriptionPosition: str = "Latest"
    parallelism: int = 1
    timeoutMs: int | None = None
    cleanupSubscription: bool = True
    resources: dict[str, Any] = field(default_factory=dict)
    py: str | None = None

    @property
    def fqfn(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"

    @property
    def subscription(self) -> str:
        """Pulsar's default subscription of a function is its fully qualified name."""
        return self.subName or self.fqfn

    @property
    def failover(self) -> bool:
        """Pulsar subscribes Failover (one active instance a partition) when order matters or
        the output is deduplicated, Shared otherwise."""
        return self.retainOrdering or self.processingGuarantees == "EFFECTIVELY_ONCE"

    @property
    def dead_letter_topic(self) -> str | None:
        """Where a message goes after maxMessageRetries redeliveries (Pulsar's default name)."""
        if self.maxMessageRetries is None:
            return None
        return self.deadLetterTopic or f"persistent://{self.tenant}/{self.namespace}/{self.name}-DLQ"

    @property
    def scratch_bytes(self) -> int:
        """Pulsar's `resources.disk`: the instance's writable space."""
        return int(self.resources.get("disk") or DEFAULT_SCRATCH_BYTES)

    @property
    def input_topics(self) -> list[str]:
        return [*self.inputs, *(t for t in self.customSerdeInputs if t not in self.inputs)]

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}

    @classmethod
    def from_json(cls, data: Any) -> FunctionConfig:
        """Parse and check a FunctionConfig JSON object; unknown keys are refused by name."""
        if not isinstance(data, dict):
            raise ConfigError("the function config must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - _IGNORED)
        if unknown:
            raise ConfigError(f"unknown function config field(s): {', '.join(unknown)}")
        config = cls(**{key: value for key, value in data.items() if key in known and value is not None})
        config.check()
        return config

    def merged(self, update: dict[str, Any]) -> FunctionConfig:
        """This config with the fields an update names (pulsar-admin's `update` sends only those)."""
        data = self.to_json()
        data.update({key: value for key, value in update.items() if value is not None})
        return FunctionConfig.from_json(data)

    def check(self) -> None:
        for key in ("tenant", "namespace", "name"):
            check_name(key, getattr(self, key))
        if not isinstance(self.className, str) or not _CLASS_NAME.match(self.className):
            raise ConfigError(f"className must be module.Class or module.function: {self.className!r}")
        _check_types(self)
        if not self.input_topics and not self.topicsPattern:
            raise ConfigError("a function needs input topics: inputs, topicsPattern or customSerdeInputs")
        if self.topicsPattern:
            try:
                re.compile(self.topicsPattern)
            except re.error as error:
                raise ConfigError(f"topicsPattern is not a regular expression: {error}") from None
        if self.processingGuarantees not in GUARANTEES:
            raise ConfigError(f"processingGuarantees must be one of {', '.join(GUARANTEES)}")
        if self.subscriptionPosition not in POSITIONS:
            raise ConfigError(f"subscriptionPosition must be one of {', '.join(POSITIONS)}")
        if not 1 <= self.parallelism <= 1024:
            raise ConfigError(f"parallelism must be between 1 and 1024: {self.parallelism}")
        if self.timeoutMs is not None and self.timeoutMs <= 0:
            raise ConfigError(f"timeoutMs must be positive: {self.timeoutMs}")
        if self.maxMessageRetries is not None and self.maxMessageRetries < 0:
            raise ConfigError(f"maxMessageRetries must not be negative: {self.maxMessageRetries}")
        if self.deadLetterTopic and self.maxMessageRetries is None:
            raise ConfigError("deadLetterTopic needs maxMessageRetries")
        if self.processingGuarantees == "EFFECTIVELY_ONCE" and self.topicsPattern:
            raise ConfigError("EFFECTIVELY_ONCE needs named inputs (one deduplicated producer per input partition)")
        if self.processingGuarantees == "EFFECTIVELY_ONCE" and self.maxMessageRetries is not None:
            raise ConfigError("EFFECTIVELY_ONCE has no dead letters (a failed message is retried in order): "
                              "drop maxMessageRetries")
        if self.runtime != "PYTHON":
            raise ConfigError(f"only the PYTHON runtime is served here, not {self.runtime}")
        if self.py is not None:
            self.py = display_name(self.py)
        _check_resources(self.resources)


def check_name(kind: str, value: Any) -> None:
    """Pulsar's rule for names (letters, digits, `_ - = : .`), minus `.` and `..`: a tenant,
    namespace or function name is a directory of the worker's, never a way out of it."""
    if not isinstance(value, str):
        raise ConfigError(f"{kind} must be a name: {value!r}")
    try:
        check_entity_name(kind, value)
    except InvalidTopicNameError as error:
        raise ConfigError(str(error)) from None


def display_name(py: str) -> str:
    """What `py` says of the code: a file name (pulsar-admin sends the path it read the file
    from, here or on the user's machine; only its last part means anything)."""
    name = py.replace("\\", "/").rsplit("/", 1)[-1]
    if not name.endswith(CODE_SUFFIXES):
        raise ConfigError(f"the code must be a .py, .zip or .whl file: {py}")
    return name


def _check_resources(resources: dict[str, Any]) -> None:
    """Pulsar's Resources (cpu cores, ram and disk bytes): numbers; only `disk` is acted on."""
    for key, value in resources.items():
        if key not in ("cpu", "ram", "disk") or not isinstance(value, int | float) or isinstance(value, bool) \
                or value < 0:
            raise ConfigError(f"resources.{key}: resources are cpu, ram and disk, as non-negative numbers")
    if resources.get("disk") is not None and not 1 << 20 <= resources["disk"] <= 1 << 40:
        raise ConfigError("resources.disk must be between 1 MiB and 1 TiB (bytes)")


_IGNORED = {"fqfn", "jar", "go", "inputSpecs", "customSchemaInputs", "producerConfig",
            "batchBuilder", "customRuntimeOptions", "exposePulsarAdminClientEnabled", "skipToLatest",
            "forwardSourceMessageProperty", "retainKeyOrdering", "windowConfig", "outputSchemaType",
            "outputTypeClassName", "maxPendingAsyncRequests", "subscriptionType"}
"""Fields of Pulsar's FunctionConfig that carry no meaning for a Python process runtime here:
accepted so a config written for Pulsar loads, and not acted on."""

_TYPES: dict[str, type | tuple[type, ...]] = {
    "inputs": list, "customSerdeInputs": dict, "userConfig": dict, "secrets": dict, "retainOrdering": bool,
    "autoAck": bool, "parallelism": int, "cleanupSubscription": bool, "resources": dict,
    "topicsPattern": str, "output": str, "outputSerdeClassName": str, "logTopic": str, "deadLetterTopic": str,
    "subName": str, "processingGuarantees": str, "subscriptionPosition": str, "runtime": str, "py": str,
}


def _check_types(config: FunctionConfig) -> None:
    for key, kind in _TYPES.items():
        value = getattr(config, key)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            raise ConfigError(f"{key} has the wrong type: {type(value).__name__}")
    for key in ("timeoutMs", "maxMessageRetries"):
        value = getattr(config, key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"{key} must be an integer")
    if not all(isinstance(topic, str) and topic for topic in config.inputs):
        raise ConfigError("inputs must be topic names")


def parse_json_flag(flag: str, text: str) -> dict[str, Any]:
    """A JSON object given as text (the CLI's `--user-config`, `--secrets`, `--custom-serde-inputs`,
    the REST API's `functionConfig` and `state` parts), refused by name when it is not one."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{flag} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} must be a JSON object")
    return value
