"""`magnetar admin`: pulsar-admin's verbs and flags over the admin REST API.

    magnetar admin tenants list
    magnetar admin topics create-partitioned-topic persistent://public/default/t -p 4
    magnetar admin topics reset-cursor persistent://public/default/t -s sub -t 10m

Output is for people by default (a list one item per line, objects as indented JSON)
and for programs with `--json`. A refusal prints the broker's reason and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.admin_client import AdminClient, AdminError, Message
from magnetar.cli import options as cli_options
from magnetar.cli import schema_verbs, transaction_verbs
from magnetar.cli.function_verbs import FUNCTION_VERBS
from magnetar.cli.parsing import UsageError, add_log_level, namespace_name, topic_name
from magnetar.cli.verbs import Verb, arg

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"
_DURATION = re.compile(r"(\d+)([smhdw]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_seconds(text: str) -> int:
    """pulsar-admin's relative times: `90`, `10s`, `10m`, `2h`, `1d`, `1w`."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 30s, 10m, 2h, 1d")
    return int(match.group(1)) * _SECONDS[match.group(2)]


_SIZE = re.compile(r"(\d+)([kKmMgGtT]?)")
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def retention_size_mb(text: str) -> int:
    """pulsar-admin's retention sizes: `-1` (no limit), bytes, or `10K`, `10M`, `2G`, `1T`."""
    if text.strip() == "-1":
        return -1
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 10M, 2G or -1")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()] // 1024**2


def retention_minutes(text: str) -> float:
    """pulsar-admin's retention times: `-1` (no limit) or a duration such as 30m, 2h, 7d."""
    if text.strip() == "-1":
        return -1
    seconds = duration_seconds(text)
    return seconds // 60 if seconds % 60 == 0 else seconds / 60


def message_id(text: str) -> tuple[int, int]:
    """`ledger:entry` as pulsar-admin writes message ids."""
    ledger, sep, entry = text.partition(":")
    try:
        if sep:
            return int(ledger), int(entry)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r} is not a message id (ledgerId:entryId)")


def _reset_cursor(admin: AdminClient, args: argparse.Namespace) -> None:
    if (args.time is None) == (args.message_id is None):
        raise UsageError("give exactly one of --time/-t and --messageId/-m")
    if args.time is not None:
        admin.reset_cursor_to_time(args.topic, args.subscription, int(time.time() * 1000) - args.time * 1000)
    else:
        admin.reset_cursor_to_message_id(args.topic, args.subscription, *args.message_id)


def _create_subscription(admin: AdminClient, args: argparse.Namespace) -> None:
    start = {"latest": None, "earliest": (-1, -1)}.get(args.message_id) if isinstance(args.message_id, str) else (
        args.message_id)
    admin.create_subscription(args.topic, args.subscription, start)


def _start_position(text: str) -> str | tuple[int, int]:
    return text if text in ("latest", "earliest") else message_id(text)


def _delayed_delivery(enable: bool, disable: bool, tick: str) -> dict[str, Any]:
    return {"active": _switch(enable, disable), "tickTime": _tick_ms(tick)}


def _names(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _switch(enable: bool, disable: bool) -> bool:
    if enable == disable:
        raise UsageError("give exactly one of --enable/-e and --disable/-d")
    return enable


def _tick_ms(text: str) -> int:
    """pulsar-admin's tick times: `1s`, `500ms`, or milliseconds."""
    if text.endswith("ms"):
        return int(text[:-2])
    return duration_seconds(text) * 1000 if text[-1:].isalpha() else int(text)


@dataclass(frozen=True)
class PolicyVerbs:
    """pulsar-admin's set-/get-/remove- triple for one policy, on a namespace or a topic."""

    suffix: str
    path: str
    value: tuple[tuple[str, ...], dict[str, Any]] | None = None
    build: Callable[[argparse.Namespace], Any] | None = None
    extra: list[tuple[tuple[str, ...], dict[str, Any]]] = field(default_factory=list)

    def verbs(self, subject: tuple[tuple[str, ...], dict[str, Any]], on_topic: bool) -> list[Verb]:
        where = subject[0][0]
        get = "get_topic_policy" if on_topic else "get_namespace_policy"
        set_ = "set_topic_policy" if on_topic else "set_namespace_policy"
        remove = "remove_topic_policy" if on_topic else "remove_namespace_policy"
        build = self.build or (lambda n: n.value)
        value = [arg(*self.value[0], dest="value", required=True, **self.value[1])] if self.value else []
        arguments = [subject, *value, *self.extra]
        return [
            Verb(f"set-{self.suffix}", f"set the {self.path} policy",
                 lambda a, n: getattr(a, set_)(getattr(n, where), self.path, build(n)), arguments),
            Verb(f"get-{self.suffix}", f"show the {self.path} policy",
                 lambda a, n: getattr(a, get)(getattr(n, where), self.path), [subject]),
            Verb(f"remove-{self.suffix}", f"remove the {self.path} policy",
                 lambda a, n: getattr(a, remove)(getattr(n, where), self.path), [subject]),
        ]


_DELAYED = PolicyVerbs(
    "delayed-delivery", "delayedDelivery", build=lambda n: _delayed_delivery(n.enable, n.disable, n.time),
    extra=[arg("-e", "--enable", action="store_true"), arg("-d", "--disable", action="store_true"),
           arg("-t", "--time", default="1s", help="tick time: 1s, 500ms (default 1s)")])
_SCHEMA = PolicyVerbs("schema-compatibility-strategy", "schemaCompatibilityStrategy",
                      arg("-c", "--compatibility", help="FULL, BACKWARD, FORWARD, ALWAYS_COMPATIBLE, ..."))
_ON_OFF = [arg("-e", "--enable", action="store_true"), arg("-d", "--disable", action="store_true")]
_SCHEMA_VALIDATION = PolicyVerbs("schema-validation-enforce", "schemaValidationEnforced",
                                 build=lambda n: _switch(n.enable, n.disable), extra=_ON_OFF)
_SCHEMA_AUTO_UPDATE = PolicyVerbs("is-allow-auto-update-schema", "isAllowAutoUpdateSchema",
                                  build=lambda n: _switch(n.enable, n.disable), extra=_ON_OFF)
_PUBLISH_RATE = PolicyVerbs(
    "publish-rate", "publishRate",
    build=lambda n: {"publishThrottlingRateInMsg": n.msg_publish_rate,
                     "publishThrottlingRateInByte": n.byte_publish_rate},
    extra=[arg("-m", "--msg-publish-rate", type=int, default=-1, help="messages a second (default -1: no limit)"),
           arg("-b", "--byte-publish-rate", type=int, default=-1, help="bytes a second (default -1: no limit)")])
_REPLICATOR_DISPATCH_RATE = PolicyVerbs(
    "replicator-dispatch-rate", "replicatorDispatchRate",
    build=lambda n: {"dispatchThrottlingRateInMsg": n.msg_dispatch_rate,
                     "dispatchThrottlingRateInByte": n.byte_dispatch_rate,
                     "ratePeriodInSecond": n.dispatch_rate_period},
    extra=[arg("-md", "--msg-dispatch-rate", type=int, default=-1, help="messages a period (default -1: no limit)"),
           arg("-bd", "--byte-dispatch-rate", type=int, default=-1, help="bytes a period (default -1: no limit)"),
           arg("-dt", "--dispatch-rate-period", type=int, default=1, help="the period in seconds (default 1)")])
NAMESPACE_POLICIES = [
    PolicyVerbs("max-producers-per-topic", "maxProducersPerTopic", arg("-p", "--max-producers-per-topic", type=int)),
    PolicyVerbs("max-consumers-per-topic", "maxConsumersPerTopic", arg("-c", "--max-consumers-per-topic", type=int)),
    PolicyVerbs("max-consumers-per-subscription", "maxConsumersPerSubscription",
                arg("-c", "--max-consumers-per-subscription", type=int)),
    PolicyVerbs("max-unacked-messages-per-consumer", "maxUnackedMessagesPerConsumer",
                arg("-c", "--max-unacked-messages-per-consumer", type=int)),
    PolicyVerbs("subscription-expiration-time", "subscriptionExpirationTime",
                arg("-t", "--time", type=float, help="minutes")),
    _DELAYED, _SCHEMA, _SCHEMA_VALIDATION, _SCHEMA_AUTO_UPDATE, _PUBLISH_RATE, _REPLICATOR_DISPATCH_RATE,
]
TOPIC_POLICIES = [
    PolicyVerbs("max-producers", "maxProducers", arg("-p", "--max-producers", type=int)),
    PolicyVerbs("max-consumers", "maxConsumers", arg("-c", "--max-consumers", type=int)),
    PolicyVerbs("max-consumers-per-subscription", "maxConsumersPerSubscription",
                arg("-c", "--max-consumers-per-subscription", type=int)),
    PolicyVerbs("max-unacked-messages-per-consumer", "maxUnackedMessagesOnConsumer",
                arg("-m", "--maxNum", type=int)),
    PolicyVerbs("max-message-size", "maxMessageSize", arg("-m", "--max-message-size", type=int)),
    # the topic's own replication clusters, over its namespace's (removed: it follows them again)
    PolicyVerbs("replication-clusters", "replication",
                arg("-c", "--clusters", type=_names, help="cluster names, comma separated")),
    _DELAYED, _SCHEMA, _SCHEMA_VALIDATION, _PUBLISH_RATE, _REPLICATOR_DISPATCH_RATE,
]

def compact_and_wait(admin: AdminClient, args: argparse.Namespace) -> str | None:
    """Start a compaction; with --wait, follow it to the end with a progress bar on stderr."""
    admin.compact(args.topic)
    if not args.wait:
        return "Topic compaction requested"
    while True:
        status = admin.compaction_status(args.topic)
        progress_bar(float(status.get("progress", 0.0)))
        if status["status"] != "RUNNING":
            print(file=sys.stderr)
            if status["status"] == "ERROR":
                raise AdminError(0, f"compaction failed: {status.get('lastError', '')}")
            return f"Compaction {status['status'].lower()}"
        time.sleep(0.2)


def progress_bar(fraction: float, width: int = 30) -> None:
    done = round(max(0.0, min(fraction, 1.0)) * width)
    print(f"\r[{'#' * done}{'.' * (width - done)}] {fraction * 100:5.1f}%", end="", file=sys.stderr, flush=True)


TOPIC = arg("topic", type=topic_name, help="persistent://tenant/namespace/topic (or a short name)")
SUBSCRIPTION = arg("-s", "--subscription", required=True, help="subscription name")
FORCE = arg("-f", "--force", action="store_true", help="close connected clients first")
NAMESPACE = arg("namespace", type=namespace_name, help="tenant/namespace")
RETENTION_ARGS = [
    arg("-t", "--time", type=retention_minutes, required=True, help="-1 (no limit) or a duration: 30m, 2h, 7d"),
    arg("-s", "--size", type=retention_size_mb, required=True, help="-1 (no limit) or a size: 100M, 10G"),
]

#: pulsar-admin clusters create/update's flags and the ClusterData field each sets.
_CLUSTER_FLAGS = (
    ("--url", "serviceUrl", "the cluster's admin API, http://host:port"),
    ("--url-secure", "serviceUrlTls", "the cluster's admin API over TLS, https://host:port"),
    ("--broker-url", "brokerServiceUrl", "the cluster's brokers, pulsar://host:port"),
    ("--broker-url-secure", "brokerServiceUrlTls", "the cluster's brokers over TLS, pulsar+ssl://host:port"),
    ("--proxy-url", "proxyServiceUrl", "a proxy in front of the cluster"),
    ("--auth-plugin", "authenticationPlugin", "the authentication plugin to reach the cluster with"),
    ("--auth-parameters", "authenticationParameters", "the plugin's parameters"),
    ("--tls-trust-certs-filepath", "brokerClientTrustCertsFilePath", "CA certificates trusted for the cluster"),
    ("--tls-key-filepath", "brokerClientKeyFilePath", "the client key (mTLS)"),
    ("--tls-certificate-filepath", "brokerClientCertificateFilePath", "the client certificate (mTLS)"),
    ("--listener-name", "listenerName", "the listener to ask the cluster's lookups for"),
)
CLUSTER_ARGS = [
    *(arg(flag, dest=name, default=None, help=doc) for flag, name, doc in _CLUSTER_FLAGS),
    arg("--tls-enable", dest="brokerClientTlsEnabled", action="store_true", default=None,
        help="reach the cluster over TLS"),
    arg("--tls-allow-insecure", dest="tlsAllowInsecureConnection", action="store_true", default=None,
        help="accept any certificate from the cluster"),
]


def _cluster_data(args: argparse.Namespace) -> dict[str, Any]:
    """The ClusterData fields the flags set (pulsar-admin leaves the others out)."""
    names = [name for _, name, _ in _CLUSTER_FLAGS] + ["brokerClientTlsEnabled", "tlsAllowInsecureConnection"]
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


RESOURCES: dict[str, list[Verb]] = {
    "clusters": [
        Verb("list", "list clusters", lambda a, _: a.clusters()),
        Verb("get", "show a cluster's data", lambda a, n: a.cluster(n.cluster), [arg("cluster")]),
        Verb("create", "add a cluster: how this broker reaches it",
             lambda a, n: a.create_cluster(n.cluster, _cluster_data(n)), [arg("cluster"), *CLUSTER_ARGS]),
        Verb("update", "change a cluster's data", lambda a, n: a.update_cluster(n.cluster, _cluster_data(n)),
             [arg("cluster"), *CLUSTER_ARGS]),
        Verb("delete", "remove a cluster no namespace replicates to", lambda a, n: a.delete_cluster(n.cluster),
             [arg("cluster")]),
    ],
    "tenants": [
        Verb("list", "list tenants", lambda a, _: a.tenants()),
        Verb("get", "show a tenant", lambda a, n: a.tenant(n.tenant), [arg("tenant")]),
        Verb("create", "create a tenant", lambda a, n: a.create_tenant(n.tenant, n.admin_roles, n.allowed_clusters),
             [arg("tenant"), arg("-r", "--admin-roles", type=lambda s: s.split(","), default=None),
              arg("-c", "--allowed-clusters", type=lambda s: s.split(","), default=None)]),
        Verb("update", "change a tenant's admin roles and allowed clusters",
             lambda a, n: a.update_tenant(n.tenant, n.admin_roles, n.allowed_clusters),
             [arg("tenant"), arg("-r", "--admin-roles", type=lambda s: s.split(","), default=None),
              arg("-c", "--allowed-clusters", type=lambda s: s.split(","), default=None)]),
        Verb("delete", "delete a tenant", lambda a, n: a.delete_tenant(n.tenant), [arg("tenant")]),
    ],
    "namespaces": [
        Verb("list", "list a tenant's namespaces", lambda a, n: a.namespaces(n.tenant), [arg("tenant")]),
        Verb("create", "create a namespace", lambda a, n: a.create_namespace(n.namespace), [NAMESPACE]),
        Verb("delete", "delete an empty namespace", lambda a, n: a.delete_namespace(n.namespace), [NAMESPACE]),
        Verb("policies", "show a namespace's policies", lambda a, n: a.namespace_policies(n.namespace),
             [NAMESPACE]),
        Verb("topics", "list a namespace's topics", lambda a, n: a.namespace_topics(n.namespace), [NAMESPACE]),
        Verb("set-clusters", "set the clusters the namespace's topics are replicated to",
             lambda a, n: a.set_replication_clusters(n.namespace, n.clusters),
             [NAMESPACE, arg("-c", "--clusters", required=True, type=_names, help="cluster names, comma separated")]),
        Verb("get-clusters", "show the clusters the namespace is replicated to",
             lambda a, n: a.replication_clusters(n.namespace), [NAMESPACE]),
        Verb("permissions", "show the roles' permissions on a namespace", lambda a, n: a.permissions(n.namespace),
             [NAMESPACE]),
        Verb("grant-permission", "grant a role actions on a namespace",
             lambda a, n: a.grant_permission(n.namespace, n.role, n.actions),
             [NAMESPACE, arg("--role", required=True),
              arg("--actions", required=True, type=_names,
                  help="produce,consume,functions,sources,sinks,packages")]),
        Verb("revoke-permission", "revoke a role's permissions on a namespace",
             lambda a, n: a.revoke_permission(n.namespace, n.role), [NAMESPACE, arg("--role", required=True)]),
        Verb("set-message-ttl", "set the namespace's message TTL",
             lambda a, n: a.set_namespace_message_ttl(n.namespace, n.messageTTL),
             [NAMESPACE, arg("-ttl", "--messageTTL", type=int, required=True, help="seconds")]),
        Verb("get-message-ttl", "show the namespace's message TTL",
             lambda a, n: a.get_namespace_message_ttl(n.namespace), [NAMESPACE]),
        Verb("remove-message-ttl", "remove the namespace's message TTL",
             lambda a, n: a.remove_namespace_message_ttl(n.namespace), [NAMESPACE]),
        *[verb for policy in NAMESPACE_POLICIES for verb in policy.verbs(NAMESPACE, on_topic=False)],
        Verb("set-retention", "set the namespace's retention of consumed data",
             lambda a, n: a.set_namespace_retention(n.namespace, n.time, n.size), [NAMESPACE, *RETENTION_ARGS]),
        Verb("get-retention", "show the namespace's retention",
             lambda a, n: a.get_namespace_retention(n.namespace), [NAMESPACE]),
        Verb("remove-retention", "remove the namespace's retention",
             lambda a, n: a.remove_namespace_retention(n.namespace), [NAMESPACE]),
        Verb("set-encryption-required", "refuse (-e) or accept again (-d) unencrypted messages in the namespace",
             lambda a, n: a.set_namespace_policy(n.namespace, "encryptionRequired", _switch(n.enable, n.disable)),
             [NAMESPACE, *_ON_OFF]),
        Verb("get-encryption-required", "show whether the namespace refuses unencrypted messages",
             lambda a, n: a.get_namespace_policy(n.namespace, "encryptionRequired"), [NAMESPACE]),
    ],
    "topics": [
        Verb("set-retention", "set the topic's retention of consumed data",
             lambda a, n: a.set_retention(n.topic, n.time, n.size), [TOPIC, *RETENTION_ARGS]),
        Verb("get-retention", "show the topic's retention", lambda a, n: a.get_retention(n.topic), [TOPIC]),
        Verb("remove-retention", "remove the topic's retention", lambda a, n: a.remove_retention(n.topic), [TOPIC]),
        Verb("trim-topic", "delete consumed ledgers out of retention now", lambda a, n: a.trim_topic(n.topic),
             [TOPIC]),
        Verb("list", "list a namespace's topics", lambda a, n: a.topics(n.namespace), [NAMESPACE]),
        Verb("create", "create a non-partitioned topic", lambda a, n: a.create_topic(n.topic), [TOPIC]),
        Verb("create-partitioned-topic", "create a partitioned topic",
             lambda a, n: a.create_partitioned_topic(n.topic, n.partitions),
             [TOPIC, arg("-p", "--partitions", type=int, required=True)]),
        Verb("update-partitioned-topic", "add partitions",
             lambda a, n: a.update_partitioned_topic(n.topic, n.partitions),
             [TOPIC, arg("-p", "--partitions", type=int, required=True)]),
        Verb("get-partitioned-topic-metadata", "show the partition count",
             lambda a, n: {"partitions": a.partitions(n.topic)}, [TOPIC]),
        Verb("delete", "delete a topic", lambda a, n: a.delete_topic(n.topic, force=n.force), [TOPIC, FORCE]),
        Verb("delete-partitioned-topic", "delete a partitioned topic",
             lambda a, n: a.delete_partitioned_topic(n.topic, force=n.force), [TOPIC, FORCE]),
        Verb("stats", "show a topic's stats", lambda a, n: a.stats(n.topic), [TOPIC]),
        Verb("partitioned-stats", "show a partitioned topic's stats",
             lambda a, n: a.partitioned_stats(n.topic, per_partition=n.per_partition),
             [TOPIC, arg("--per-partition", action="store_true")]),
        Verb("internal-stats", "show ledgers and cursors", lambda a, n: a.internal_stats(n.topic), [TOPIC]),
        Verb("last-message-id", "show the last message id", lambda a, n: a.last_message_id(n.topic), [TOPIC]),
        Verb("subscriptions", "list a topic's subscriptions", lambda a, n: a.subscriptions(n.topic), [TOPIC]),
        Verb("create-subscription", "create a subscription", _create_subscription,
             [TOPIC, SUBSCRIPTION, arg("-m", "--messageId", dest="message_id", type=_start_position,
                                       default="latest", help="latest, earliest or ledgerId:entryId")]),
        Verb("unsubscribe", "delete a subscription",
             lambda a, n: a.delete_subscription(n.topic, n.subscription, force=n.force), [TOPIC, SUBSCRIPTION, FORCE]),
        Verb("reset-cursor", "move a subscription to a time or a message id", _reset_cursor,
             [TOPIC, SUBSCRIPTION, arg("-t", "--time", type=duration_seconds, help="that long ago, e.g. 10m"),
              arg("-m", "--messageId", dest="message_id", type=message_id, help="ledgerId:entryId")]),
        Verb("skip", "skip messages of a subscription",
             lambda a, n: a.skip(n.topic, n.subscription, n.count),
             [TOPIC, SUBSCRIPTION, arg("-n", "--count", type=int, required=True)]),
        Verb("clear-backlog", "skip every message of a subscription",
             lambda a, n: a.clear_backlog(n.topic, n.subscription), [TOPIC, SUBSCRIPTION]),
        Verb("expire-messages", "expire messages older than a time",
             lambda a, n: a.expire_messages(n.topic, n.subscription, n.expireTime),
             [TOPIC, SUBSCRIPTION, arg("-t", "--expireTime", type=duration_seconds, required=True)]),
        Verb("set-replicated-subscription-status", "mirror a subscription's position to the other clusters (PIP-33)",
             lambda a, n: a.set_replicated_subscription_status(n.topic, n.subscription, _switch(n.enable, n.disable)),
             [TOPIC, SUBSCRIPTION, *_ON_OFF]),
        Verb("get-replicated-subscription-status", "show whether a subscription is replicated",
             lambda a, n: a.replicated_subscription_status(n.topic, n.subscription), [TOPIC, SUBSCRIPTION]),
        Verb("peek-messages", "show messages of a subscription's backlog",
             lambda a, n: a.peek_messages(n.topic, n.subscription, n.count),
             [TOPIC, SUBSCRIPTION, arg("-n", "--count", type=int, default=1)]),
        Verb("examine-message", "show the n-th message from either end",
             lambda a, n: a.examine_message(n.topic, n.initialPosition, n.messagePosition),
             [TOPIC, arg("-i", "--initialPosition", choices=("earliest", "latest"), default="latest"),
              arg("-m", "--messagePosition", type=int, default=1)]),
        Verb("get-message-by-id", "show one message",
             lambda a, n: a.get_message_by_id(n.topic, n.ledgerId, n.entryId),
             [TOPIC, arg("-l", "--ledgerId", type=int, required=True),
              arg("-e", "--entryId", type=int, required=True)]),
        Verb("compact", "start compacting a topic (each partition of a partitioned one)", compact_and_wait,
             [TOPIC, arg("-w", "--wait", action="store_true", help="wait for the end, showing progress on stderr")]),
        Verb("compaction-status", "show the status of a topic's compaction",
             lambda a, n: a.compaction_status(n.topic), [TOPIC]),
        Verb("get-compaction-threshold", "show a topic's compaction threshold",
             lambda a, n: a.get_compaction_threshold(n.topic), [TOPIC]),
        Verb("set-compaction-threshold", "compact automatically beyond this many bytes",
             lambda a, n: a.set_compaction_threshold(n.topic, n.threshold),
             [TOPIC, arg("-t", "--threshold", type=int, required=True, help="bytes")]),
        Verb("remove-compaction-threshold", "remove a topic's compaction threshold",
             lambda a, n: a.remove_compaction_threshold(n.topic), [TOPIC]),
        Verb("unload", "unload a topic (clients reconnect)", lambda a, n: a.unload(n.topic), [TOPIC]),
        Verb("terminate", "stop a topic taking messages", lambda a, n: a.terminate(n.topic), [TOPIC]),
        Verb("partitioned-terminate", "stop every partition taking messages",
             lambda a, n: a.terminate_partitioned_topic(n.topic), [TOPIC]),
        *[verb for policy in TOPIC_POLICIES for verb in policy.verbs(TOPIC, on_topic=True)],
    ],
    "schemas": [Verb(name, help_, action, arguments) for name, help_, action, arguments in schema_verbs.VERBS],
    "brokers": [
        Verb("version", "show the broker's version", lambda a, _: a.version()),
        Verb("healthcheck", "check that the broker answers", lambda a, _: a.healthcheck() or "ok"),
        Verb("get-runtime-config", "show the configuration in effect", lambda a, _: a.runtime_configuration()),
    ],
    "functions": FUNCTION_VERBS,
    "transactions": transaction_verbs.VERBS,
}


def register(commands: argparse._SubParsersAction) -> None:
    admin = commands.add_parser("admin", help="manage a broker over its REST API (pulsar-admin's verbs)",
                                description="Manage a broker over its admin REST API, as pulsar-admin does.")
    admin.add_argument("--admin-url", default=os.environ.get("MAGNETAR_ADMIN_URL", DEFAULT_ADMIN_URL),
                       help=f"the broker's HTTP URL (default $MAGNETAR_ADMIN_URL or {DEFAULT_ADMIN_URL})")
    admin.add_argument("--json", action="store_true", help="print JSON for programs")
    cli_options.add_security(admin)
    resources = admin.add_subparsers(dest="resource", required=True, metavar="RESOURCE")
    for resource, verbs in RESOURCES.items():
        parser = resources.add_parser(resource, help=f"{resource} operations")
        verb_parsers = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        for verb in verbs:
            verb_parser = verb_parsers.add_parser(verb.name, help=verb.help, description=verb.help)
            for flags, options in verb.arguments:
                verb_parser.add_argument(*flags, **options)
            add_log_level(verb_parser)
            verb_parser.set_defaults(run=run, action=verb.action)


def _admin_client(args: argparse.Namespace) -> AdminClient:
    try:
        security = cli_options.security_arguments(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return AdminClient(args.admin_url, **security)  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    """A refusal (AdminError) becomes one line and exit code 1 in parsing.run_command."""
    _print(args.action(_admin_client(args), args), as_json=args.json)
    return 0


def _print(result: Any, *, as_json: bool) -> None:
    if result is None:
        return
    if isinstance(result, Message) or (isinstance(result, list) and result and isinstance(result[0], Message)):
        _print_messages(result if isinstance(result, list) else [result], as_json)
    elif as_json or isinstance(result, bool):  # true/false, as pulsar-admin prints them
        print(json.dumps(result))
    elif isinstance(result, list) and not any(isinstance(item, dict | list) for item in result):
        for item in result:  # names, one a line
            print(item)
    elif isinstance(result, dict | list):  # records (a schema's versions, ...): JSON, as pulsar-admin prints them
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(result)


def _print_messages(messages: list[Message], as_json: bool) -> None:
    for message in messages:
        if as_json:
            print(json.dumps({"messageId": message.message_id, "properties": message.properties,
                              "data": message.data.decode(errors="replace")}))
            continue
        print(f"Message ID: {message.message_id}")
        for key, value in sorted(message.properties.items()):
            print(f"  property {key}: {value}")
        print(message.data.decode(errors="replace"))
