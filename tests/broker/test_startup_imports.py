"""What a default `magnetar standalone` imports before it accepts connections.

Start-up time and idle memory are mostly import time and imported code, so features that
are off (TLS, authentication providers, compaction runs, payload formats, delayed-delivery
trackers, codecs, Spark, the other commands) must not be imported until used. This test
starts a default broker in a child process, takes its `sys.modules` the moment it logs
"accepting connections", and compares it with the lists below: a module that is not on
them fails the test. If a new module really is needed at start-up, add it here and say
why in the commit; measure with benchmarks/startup_bench.py.

The standard library is not listed: its modules are part of every Python process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Every magnetar module a default broker may import at start-up, by package ("." is the package itself).
MAGNETAR = {
    "magnetar": ".",
    # transactions: /admin/v3/transactions' routes (they read the coordinator only when it runs);
    # produce: the REST producer's routes (its value encoding loads with the first request);
    # loop_slices: what /metrics and the REST producer make their work in slices with
    "magnetar.admin": ". backlog_quotas brokers compaction loop_slices messages metrics namespaces operations "
                      "permissions policy_table produce responses retention schemas security server subscriptions "
                      "tenants topics transactions",
    "magnetar.broker": ". deduplication entry_metadata errors schema_registry tls",
    "magnetar.broker.auth": ". authentication authorization issued operations",
    "magnetar.broker.compaction": ". manager options service",
    # the configuration's keys carry their rules; secrets: which values the start-up log masks
    "magnetar.broker.config": ". loading properties rules secrets service_configuration",
    "magnetar.broker.delayed_delivery": ".",
    "magnetar.broker.entry_filters": ". policy",
    "magnetar.broker.monitors": ". backlog_quota compaction inactivity message_expiry periodic retention revalidation",
    # clusters: tenants' allowedClusters are checked against them; watchers: what tells open
    # topics (and replicators) of a policy's or a cluster's change
    "magnetar.broker.policies": ". backlog_quota clusters resources retention topic_policies watchers",
    # loop_lag: the event-loop probe runs from the start; topics.latency: every producer records into it
    # transaction_participants: the coordinator, on in the standalone (it recovers its log at start)
    "magnetar.broker.service": ". broker_service collector config_checks loop_lag transaction_participants",
    # replicators: what a topic knows of replication (the replicators themselves load when used);
    # publish_rate: the policy's declaration, which the admin routes and every SEND's limits read
    "magnetar.broker.topics": ". abstract_subscription abstract_topic consumer consumer_selectors context "
                              "failed_writes full_disk latency loop_bridge positions producer publish_rate "
                              "replicators stats topic_limits",
    # the coordinator, its log and its records (on in the standalone); a topic's buffer and a subscription's
    # pending acknowledgements load with the first topic that held a transaction
    "magnetar.broker.transactions": ". coordinator log records",  # records: the coordinator's TxnMeta, split from it
    "magnetar.broker.topics.persistent": ". backlog compacted_reads dispatcher filter_gate internal_stats "
                                         "key_shared_dispatcher message_expiry persistent_subscription "
                                         "persistent_topic shared_dispatcher single_active_dispatcher",
    "magnetar.broker.transport": ". accept_errors advertised_listeners connection connection_controller "
                                 "consumer_commands frame_writes lookup_commands publish_checks schema_commands "
                                 "read_turns schema_waits topic_list",  # read_turns: ServerCnx's base
    "magnetar.cli": ". parsing standalone",
    # the functions worker's routes, on in the standalone as in Pulsar's; the worker itself, its
    # REST handlers and supervisor load with the first request (or a stored function)
    "magnetar.functions": ". config on_demand routes store",
    "magnetar.plugins": ".",
    # /metrics' text format, for the admin API's metrics
    "magnetar.prometheus": ".",
    # the registry's model and rules; avro itself loads with the first Avro schema
    "magnetar.schemas": ". bounded_cache compatibility definitions errors model protocol registry",
    # the did-you-mean of configuration errors
    "magnetar.spelling": ".",
    "magnetar.storage": ". appends compacted_ledger config cursor disk_space entry_cache entry_reader errors faults "
                        "file_pool "
                        "group_commit layout ledger ledger_files ledger_ids ledger_recovery ledger_slot "
                        "ledger_trimmer managed_ledger managed_ledger_factory message_finder metadata_store "
                        "position range_set rollover space_reserve",
    # the HTTP server the admin API and the functions worker's routes are served on
    "magnetar.web": ". connection_state messages routing server",
    "magnetar.wire": ". checksum commands entry errors frames message_id proto proto.pulsar_api_pb2 topic_name txn",
}
ALLOWED_MAGNETAR = frozenset(package if name == "." else f"{package}.{name}"
                             for package, names in MAGNETAR.items() for name in names.split())

#: Third-party top-level packages: the admin API's HTTP parser (httptools, llhttp's binding),
#: loaded once the binary listener serves; before that the wire codec (protobuf),
#: storage (crc32c, sortedcontainers), Key_Shared's sticky key hash (mmh3, one compiled
#: module), the optional event loop (uvloop), and what the interpreter itself loads
#: (setuptools' path hook, Cython's runtime modules of compiled extensions).
ADMIN_THIRD_PARTY = frozenset({"httptools"})
ALLOWED_THIRD_PARTY = ADMIN_THIRD_PARTY | {
    "typing_extensions", "google", "crc32c", "mmh3", "sortedcontainers", "uvloop",
    "__main__", "_distutils_hack", "cython_runtime",
}

ACCEPTING = "accepting connections"
BINARY_READY = "binary protocol listener ready"

# Runs the real command line in a child process: on the log line named second it writes
# the sorted module names to the file named first, then stops the broker (as SIGTERM would
# once it accepts connections; at once before that, when SIGTERM is not handled yet).
PROBE = f"""
import logging, os, signal, sys
out, line = sys.argv.pop(1), sys.argv.pop(1)

class Probe(logging.Handler):
    def emit(self, record):
        if line in record.getMessage():
            with open(out, "w") as file:
                file.write("\\n".join(sorted(sys.modules)))
            if line == "{ACCEPTING}":
                os.kill(os.getpid(), signal.SIGTERM)
            else:
                os._exit(0)

logging.getLogger("magnetar").addHandler(Probe())
from magnetar.cli import main
sys.exit(main(["standalone", *sys.argv[1:]]))
"""


def modules_at_start(tmp_path: Path, *args: str, line: str = ACCEPTING) -> list[str]:
    out = tmp_path / "modules.txt"
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), line, "--data-dir", str(tmp_path / "data"),
                           "--port", "0", "--http-port", "0", *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and out.exists(), done.stderr
    return out.read_text().split()


def unexpected(modules: list[str]) -> list[str]:
    """The modules neither the standard library nor the lists above account for."""
    def allowed(name: str) -> bool:
        top = name.split(".", maxsplit=1)[0]
        if top == "magnetar":
            return name in ALLOWED_MAGNETAR
        return top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or top.startswith("_cython_")
    return [name for name in modules if not allowed(name)]


@pytest.fixture(scope="module")
def default_start(tmp_path_factory) -> list[str]:
    return modules_at_start(tmp_path_factory.mktemp("startup"))


def test_a_default_broker_imports_only_what_it_needs(default_start):
    assert "magnetar.broker.service.broker_service" in default_start  # the probe saw a broker that started
    assert unexpected(default_start) == []


@pytest.mark.parametrize("module", [
    "cryptography", "jwt", "passlib", "bcrypt",  # authentication providers
    "pyarrow", "pyspark", "pandas",  # Spark and Arrow
    "lz4", "zstandard", "cramjam",  # payload codecs: the broker never opens a payload
    "pyroaring",  # delayed-delivery trackers, made by the first subscription that needs one
    "javaproperties", "xml", "difflib",  # a --config file, a mistyped key
    "importlib.metadata", "crc32c._cli",  # crc32c's package init (~3.4 MB): wire/checksum.py loads its extension
    "magnetar.broker.config.pulsar_keys",  # a key that is not magnetar's
    "magnetar.broker.auth.session",  # authentication: off by default
    "magnetar.broker.topics.nonpersistent.non_persistent_topic",  # made by the first non-persistent topic
    "magnetar.functions.worker", "magnetar.functions.api", "magnetar.functions.supervisor",  # no function deployed
    "magnetar.functions.instance", "magnetar.functions.stats_view",
    "magnetar.broker.compaction.compactor", "magnetar.wire.batch", "magnetar.formats",
    "magnetar.broker.auth.providers", "magnetar.spark", "magnetar.client", "magnetar.cli.admin",
    "magnetar.console",  # the web console: its files load with the first request for the page
])
def test_features_that_are_off_are_not_imported(default_start, module):
    assert not any(name == module or name.startswith(module + ".") for name in default_start)


def test_a_pulsar_conf_file_loads_its_parser_and_pulsars_keys_and_nothing_else(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("metadataStoreUrl=zk:1\nmaxMessageSize=1048576\n")
    modules = modules_at_start(tmp_path, "--config", str(conf))
    assert "javaproperties" in modules and "magnetar.broker.config.pulsar_keys" in modules
    assert [name for name in unexpected(modules)
            if not name.startswith("javaproperties") and name != "magnetar.broker.config.pulsar_keys"] == []


def test_the_binary_listener_does_not_wait_for_the_admin_apis_code(tmp_path):
    """The admin API (magnetar.admin, its HTTP server magnetar.web, httptools) and the functions
    worker load in a thread once the binary listener serves (test_startup_order.py shows clients
    served meanwhile)."""
    modules = modules_at_start(tmp_path, line=BINARY_READY)
    assert "magnetar.broker.service.broker_service" in modules
    admin_side = [name for name in modules if name.split(".")[0] in ADMIN_THIRD_PARTY
                  or name.startswith(("magnetar.admin", "magnetar.web", "magnetar.prometheus", "magnetar.functions"))]
    assert admin_side == []
