"""`magnetar admin functions ...`: pulsar-admin's functions verbs and flags.

    magnetar admin functions create --py excl.py --classname excl.Exclamation \\
        --inputs in --output out
    magnetar admin functions status --name excl
    magnetar admin functions querystate --name wordcount --key hello
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from magnetar.admin_client import AdminClient, FunctionsAdmin
from magnetar.cli.parsing import UsageError
from magnetar.cli.verbs import Verb, arg
from magnetar.functions.config import ConfigError, parse_json_flag

GUARANTEES = ("ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE")

NAME_ARGS = [
    arg("--tenant", help="the function's tenant (default public)"),
    arg("--namespace", help="the function's namespace (default default)"),
    arg("--name", help="the function's name"),
    arg("--fqfn", help="tenant/namespace/name, instead of the three flags"),
]
INSTANCE = arg("--instance-id", type=int, help="one instance (default: all)")


def _json_object(flag: str) -> Any:
    def parse(text: str) -> dict[str, Any]:
        try:
            return parse_json_flag(flag, text)
        except ConfigError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return parse


def _topics(text: str) -> list[str]:
    return [topic.strip() for topic in text.split(",") if topic.strip()]


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return text.lower() == "true"


CONFIG_ARGS = [
    arg("--py", type=Path, help="the function's code: a .py, .zip or .whl"),
    arg("--classname", "--className", dest="classname", help="module.Class or module.function"),
    arg("--inputs", type=_topics, help="input topics, comma separated"),
    arg("--topics-pattern", "--topicsPattern", dest="topics_pattern", help="a regex of input topics"),
    arg("--output", help="the output topic (none unless given)"),
    arg("--log-topic", "--logTopic", dest="log_topic", help="a topic for the function's log lines"),
    arg("--processing-guarantees", "--processingGuarantees", dest="processing_guarantees",
        choices=GUARANTEES, help="default ATLEAST_ONCE"),
    arg("--retain-ordering", action="store_true", default=None, help="one instance a partition (Failover)"),
    arg("--user-config", "--userConfig", dest="user_config", type=_json_object("--user-config"),
        help="a JSON object, read with context.get_user_config_value"),
    arg("--secrets", type=_json_object("--secrets"), help="a JSON object, read with context.get_secret"),
    arg("--dead-letter-topic", dest="dead_letter_topic", help="where messages go after --max-message-retries"),
    arg("--max-message-retries", dest="max_message_retries", type=int, help="redeliveries before dead-lettering"),
    arg("--subs-name", dest="subs_name", help="the input subscription (default tenant/namespace/name)"),
    arg("--subs-position", dest="subs_position", choices=("Latest", "Earliest"), help="default Latest"),
    arg("--parallelism", type=int, help="the number of instances (default 1)"),
    arg("--timeout-ms", dest="timeout_ms", type=int, help="the most one process() call may take"),
    arg("--custom-serde-inputs", "--customSerdeInputs", dest="custom_serde_inputs",
        type=_json_object("--custom-serde-inputs"), help='{"topic": "module.SerDe"}'),
    arg("--output-serde-classname", "--outputSerdeClassName", dest="output_serde_classname",
        help="the output's serde class"),
    arg("--auto-ack", dest="auto_ack", type=_bool, help="true (default) or false: the function acks itself"),
    arg("--function-config-file", dest="function_config_file", type=Path,
        help="a JSON file of FunctionConfig fields; flags override it"),
]
_CONFIG_FIELDS = {
    "classname": "className", "inputs": "inputs", "topics_pattern": "topicsPattern", "output": "output",
    "log_topic": "logTopic", "processing_guarantees": "processingGuarantees", "retain_ordering": "retainOrdering",
    "user_config": "userConfig", "secrets": "secrets", "dead_letter_topic": "deadLetterTopic",
    "max_message_retries": "maxMessageRetries", "subs_name": "subName", "subs_position": "subscriptionPosition",
    "parallelism": "parallelism", "timeout_ms": "timeoutMs", "custom_serde_inputs": "customSerdeInputs",
    "output_serde_classname": "outputSerdeClassName", "auto_ack": "autoAck",
}


def _names(args: argparse.Namespace, config: dict[str, Any] | None = None) -> tuple[str, str, str]:
    """pulsar-admin's inference: --fqfn, else the flags, else the config file, with tenant
    `public` and namespace `default`."""
    config = config or {}
    if args.fqfn:
        parts = args.fqfn.split("/")
        if len(parts) != 3 or not all(parts):
            raise UsageError(f"--fqfn must be tenant/namespace/name, not {args.fqfn!r}")
        return parts[0], parts[1], parts[2]
    name = args.name or config.get("name")
    if not name:
        raise UsageError("--name (or --fqfn) is required")
    return args.tenant or config.get("tenant") or "public", args.namespace or config.get("namespace") or "default", name


def _config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if args.function_config_file:
        try:
            config = json.loads(args.function_config_file.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise UsageError(f"--function-config-file: {error}") from None
    config.update({key: getattr(args, flag) for flag, key in _CONFIG_FIELDS.items() if getattr(args, flag) is not None})
    config["tenant"], config["namespace"], config["name"] = _names(args, config)
    if args.py is not None:
        if not args.py.is_file():
            raise UsageError(f"--py: no such file {args.py}")
        config["py"] = args.py.name
    return config


def _create(admin: AdminClient, args: argparse.Namespace) -> str:
    config = _config(args)
    if args.py is None:
        raise UsageError("--py is required: the function's .py, .zip or .whl")
    if not config.get("className"):
        raise UsageError("--classname is required")
    FunctionsAdmin(admin).create(config, args.py)
    return "Created successfully"


def _update(admin: AdminClient, args: argparse.Namespace) -> str:
    FunctionsAdmin(admin).update(_config(args), args.py)
    return "Updated successfully"


def _control(verb: str, done: str) -> Any:
    def action(admin: AdminClient, args: argparse.Namespace) -> str:
        FunctionsAdmin(admin).control(verb, *_names(args), args.instance_id)
        return done
    return action


def _trigger(admin: AdminClient, args: argparse.Namespace) -> str:
    if (args.trigger_value is None) == (args.trigger_file is None):
        raise UsageError("give one of --trigger-value or --trigger-file")
    value = args.trigger_value.encode() if args.trigger_value is not None else args.trigger_file.read_bytes()
    return FunctionsAdmin(admin).trigger(*_names(args), value, args.topic)


def _download(admin: AdminClient, args: argparse.Namespace) -> str:
    args.destination_file.write_bytes(FunctionsAdmin(admin).download(*_names(args)))
    return f"Downloaded successfully to {args.destination_file}"


def _put_state(admin: AdminClient, args: argparse.Namespace) -> str:
    if "key" not in args.state:
        raise UsageError('--state needs a "key"')
    FunctionsAdmin(admin).put_state(*_names(args), args.state)
    return "Put state successfully"


FUNCTION_VERBS = [
    Verb("create", "deploy a function", _create, [*NAME_ARGS, *CONFIG_ARGS]),
    Verb("update", "change a function's config or code", _update, [*NAME_ARGS, *CONFIG_ARGS]),
    Verb("delete", "undeploy a function and its state",
         lambda a, n: FunctionsAdmin(a).delete(*_names(n)) or "Deleted successfully", NAME_ARGS),
    Verb("get", "show a function's config", lambda a, n: FunctionsAdmin(a).get(*_names(n)), NAME_ARGS),
    Verb("download", "save a function's code to a file", _download,
         [*NAME_ARGS, arg("--destination-file", dest="destination_file", type=Path, required=True)]),
    Verb("list", "list a namespace's functions",
         lambda a, n: FunctionsAdmin(a).list(n.tenant or "public", n.namespace or "default"),
         [arg("--tenant"), arg("--namespace")]),
    Verb("status", "show whether instances run and what they counted",
         lambda a, n: FunctionsAdmin(a).status(*_names(n), n.instance_id), [*NAME_ARGS, INSTANCE]),
    Verb("stats", "show the instances' processing stats",
         lambda a, n: FunctionsAdmin(a).stats(*_names(n), n.instance_id), [*NAME_ARGS, INSTANCE]),
    Verb("start", "start stopped instances", _control("start", "Started successfully"), [*NAME_ARGS, INSTANCE]),
    Verb("stop", "stop instances (they stay stopped across restarts)", _control("stop", "Stopped successfully"),
         [*NAME_ARGS, INSTANCE]),
    Verb("restart", "restart instances", _control("restart", "Restarted successfully"), [*NAME_ARGS, INSTANCE]),
    Verb("trigger", "send a value to an input and print the function's output", _trigger,
         [*NAME_ARGS, arg("--topic", help="the input topic (default the first)"),
          arg("--trigger-value", dest="trigger_value"), arg("--trigger-file", dest="trigger_file", type=Path)]),
    Verb("querystate", "show a key of the function's state",
         lambda a, n: FunctionsAdmin(a).query_state(*_names(n), n.key),
         [*NAME_ARGS, arg("-k", "--key", required=True)]),
    Verb("putstate", "set a key of the function's state", _put_state,
         [*NAME_ARGS, arg("-s", "--state", required=True, type=_json_object("--state"),
                          help='{"key": ..., "stringValue" | "byteValue" (base64) | "numberValue": ...}')]),
]
