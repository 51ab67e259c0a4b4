"""`magnetar admin schemas get|upload|delete|extract|compatibility`, with pulsar-admin's flags.

`upload` and `compatibility` read a schema payload file as pulsar-admin does
(`{"type": "AVRO", "schema": "<definition>", "properties": {}}`). `extract` takes the schema
of a Python class where pulsar-admin loads a Java class from a jar: `-j/--jar` names a
Python file or an importable module, `-c/--classname` a class in it with a `schema()`
method returning the Avro definition (the official client's `pulsar.schema.Record`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.cli.parsing import UsageError, topic_name

if TYPE_CHECKING:
    from magnetar.admin_client import AdminClient

TOPIC = (("topic",), {"type": topic_name, "help": "persistent://tenant/namespace/topic (or a short name)"})
FILENAME = (("-f", "--filename"), {"required": True, "help": "a file holding the schema payload (JSON)"})


def get(admin: AdminClient, args: argparse.Namespace) -> Any:
    if args.all_version:
        return admin.get_all_schemas(args.topic)
    return admin.get_schema(args.topic, args.version)


def upload(admin: AdminClient, args: argparse.Namespace) -> str:
    version = admin.upload_schema(args.topic, read_payload(args.filename))
    return f"schema version {version}"


def compatibility(admin: AdminClient, args: argparse.Namespace) -> Any:
    return admin.test_schema_compatibility(args.topic, read_payload(args.filename))


def delete(admin: AdminClient, args: argparse.Namespace) -> str:
    return f"deleted at version {admin.delete_schema(args.topic, force=args.force)}"


def extract(admin: AdminClient, args: argparse.Namespace) -> Any:
    definition = _class_schema(args.jar, args.classname)
    payload = {"type": args.type.upper(), "schema": json.dumps(definition), "properties": {}}
    if args.dry_run:
        return payload
    return f"schema version {admin.upload_schema(args.topic, payload)}"


def read_payload(filename: str) -> dict[str, Any]:
    """A payload file, refused with a message naming `--filename` when it cannot be one."""
    try:
        payload = json.loads(Path(filename).read_text())
    except OSError as exc:
        raise UsageError(f"--filename {filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"--filename {filename} is not JSON: {exc}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        raise UsageError(f'--filename {filename} must hold {{"type": "AVRO", "schema": "...", "properties": {{}}}}')
    return payload


def _class_schema(source: str, classname: str) -> Any:
    module = _load(source)
    cls = getattr(module, classname, None)
    if cls is None or not callable(getattr(cls, "schema", None)):
        raise UsageError(f"--classname {classname}: {source} has no class of that name with a schema() method")
    return cls.schema()


def _load(source: str) -> Any:
    """A Python file (path ending in .py) or an importable module name."""
    try:
        if source.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(source).stem, source)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {source}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(source)
    except (ImportError, OSError) as exc:
        raise UsageError(f"--jar {source}: {exc}") from None


VERBS: list[tuple[str, str, Any, list[tuple[tuple[str, ...], dict[str, Any]]]]] = [
    ("get", "show a topic's schema (the latest, a version, or all)", get,
     [TOPIC, (("--version",), {"type": int, "help": "a version number"}),
      (("-a", "--all-version"), {"action": "store_true", "help": "every version since the last delete"})]),
    ("upload", "register a schema from a payload file", upload, [TOPIC, FILENAME]),
    ("delete", "delete a topic's schema (a tombstone; --force forgets every version)", delete,
     [TOPIC, (("-f", "--force"), {"action": "store_true", "help": "forget every version"})]),
    ("extract", "register the schema of a Python Record class", extract,
     [TOPIC, (("-j", "--jar"), {"required": True, "help": "a Python file or module (pulsar-admin: a jar)"}),
      (("-c", "--classname"), {"required": True, "help": "the class, with a schema() method"}),
      (("-t", "--type"), {"required": True, "choices": ("avro", "json", "AVRO", "JSON")}),
      (("-a", "--always-allow-null"), {"action": "store_true",
                                       "help": "accepted for pulsar-admin's sake; Record fields are nullable already"}),
      (("-n", "--dry-run"), {"action": "store_true", "help": "print the payload instead of uploading it"})]),
    ("compatibility", "would the topic accept the schema of a payload file?", compatibility, [TOPIC, FILENAME]),
]
