"""Functions, their code and their state, durable in the broker's metadata store: a
deployment survives a restart or a SIGKILL of the broker with whatever it had counted."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from magnetar.functions.config import FunctionConfig
from magnetar.storage.metadata_store import MetadataStore

_META = "/functions/meta/"
_CODE = "/functions/code/"
_STATE = "/functions/state/"


def _new_id() -> str:
    """A random id as Pulsar's worker gives one (a UUID's hex); uuid loads with the first
    deployment, not with every broker (it imports `platform`, ~10 ms)."""
    import uuid  # noqa: PLC0415

    return uuid.uuid4().hex


@dataclass
class Deployment:
    """What the worker keeps of a function: its config, its ids, which instances an operator
    stopped (`functions stop`), and the role that created or last updated it, which its
    instances act as (None: deployed with authentication off)."""

    config: FunctionConfig
    function_id: str = field(default_factory=_new_id)
    version: int = 0
    stopped: list[int] = field(default_factory=list)
    role: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config.to_json(), "functionId": self.function_id, "version": self.version,
                "stopped": self.stopped, "role": self.role}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Deployment:
        return cls(FunctionConfig.from_json(data["config"]), data["functionId"], data["version"],
                   list(data.get("stopped", [])), data.get("role"))


class FunctionStore:
    def __init__(self, metadata: MetadataStore) -> None:
        self.metadata = metadata

    def get(self, fqfn: str) -> Deployment | None:
        raw = self.metadata.get(_META + fqfn)
        return None if raw is None else Deployment.from_json(json.loads(raw))

    def exists(self, fqfn: str) -> bool:
        """Whether something is stored as `fqfn`, loadable or not."""
        return self.metadata.get(_META + fqfn) is not None

    def code(self, fqfn: str) -> bytes | None:
        return self.metadata.get(_CODE + fqfn)

    def fqfns(self) -> list[str]:
        return [key[len(_META):] for key in self.metadata.list(_META)]

    def names(self, tenant: str, namespace: str) -> list[str]:
        prefix = f"{_META}{tenant}/{namespace}/"
        return sorted(key[len(prefix):] for key in self.metadata.list(prefix))

    def save(self, deployment: Deployment, code: bytes | None) -> None:
        """The config and (when given) the code in one transaction: a crash leaves either the
        old function or the new one."""
        fqfn = deployment.config.fqfn
        with self.metadata.transaction() as writer:
            writer.put(_META + fqfn, json.dumps(deployment.to_json()).encode())
            if code is not None:
                writer.put(_CODE + fqfn, code)

    def delete(self, fqfn: str) -> None:
        with self.metadata.transaction() as writer:
            writer.delete(_META + fqfn)
            writer.delete(_CODE + fqfn)
            writer.delete_prefix(f"{_STATE}{fqfn}/")

    # -- state (Pulsar's FunctionState JSON: key, stringValue | byteValue | numberValue, version)
    def state(self, fqfn: str, key: str) -> dict[str, Any] | None:
        raw = self.metadata.get(f"{_STATE}{fqfn}/{key}")
        return None if raw is None else json.loads(raw)

    def put_state(self, fqfn: str, key: str, value: dict[str, Any]) -> dict[str, Any]:
        return self._put_state(fqfn, key, value, self.state(fqfn, key) or {})

    def incr(self, fqfn: str, key: str, amount: int) -> dict[str, Any]:
        """Counters are read-modify-write under the worker's single event loop thread, so
        instances incrementing at once never lose an update."""
        before = self.state(fqfn, key) or {}
        return self._put_state(fqfn, key, {"numberValue": int(before.get("numberValue") or 0) + amount}, before)

    def _put_state(self, fqfn: str, key: str, value: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
        stored = {"key": key, **_value_of(value), "version": before.get("version", -1) + 1}
        self.metadata.put(f"{_STATE}{fqfn}/{key}", json.dumps(stored).encode())
        return stored

    def delete_state(self, fqfn: str, key: str) -> bool:
        if self.metadata.get(f"{_STATE}{fqfn}/{key}") is None:
            return False
        self.metadata.delete(f"{_STATE}{fqfn}/{key}")
        return True


def _value_of(state: dict[str, Any]) -> dict[str, Any]:
    """One value of a FunctionState: a number, else bytes shown as text when they are UTF-8
    (querystate prints `stringValue` then, as Pulsar's does)."""
    if state.get("numberValue") is not None:
        return {"numberValue": int(state["numberValue"])}
    if state.get("byteValue") is not None:
        data = base64.b64decode(state["byteValue"], validate=True)
        try:
            return {"stringValue": data.decode()}
        except UnicodeDecodeError:
            return {"byteValue": state["byteValue"]}
    if state.get("stringValue") is not None:
        return {"stringValue": str(state["stringValue"])}
    raise ValueError("a state needs stringValue, byteValue or numberValue")

