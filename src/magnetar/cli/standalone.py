"""`magnetar standalone`: an embedded broker with its admin API and its data on local disk."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import resource
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.broker.auth.operations import FUNCTIONS
from magnetar.broker.config import ConfigError, ServiceConfiguration
from magnetar.broker.config.loading import LoadedConfiguration, load_configuration
from magnetar.broker.config.properties import Setting
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.policies.topic_policies import REPLICATION_CLUSTERS
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.service.collector import settle_after_start
from magnetar.broker.service.config_checks import check_features
from magnetar.broker.transport.accept_errors import BrokerEventLoop
from magnetar.cli.parsing import add_log_level
from magnetar.storage import DataDirLockedError

if TYPE_CHECKING:
    from magnetar.admin.server import AdminServer
    from magnetar.broker.policies.resources import NamespaceResources
    from magnetar.functions.on_demand import FunctionsOnDemand
    from magnetar.functions.supervisor import Endpoints
    from magnetar.replication import ReplicationService
    from magnetar.wire.topic_name import TopicName

log = logging.getLogger("magnetar")
_NO_HARD_LIMIT_TARGET = 1 << 20
"""Soft limit to ask for when the hard one is unlimited (macOS): Linux's default nr_open."""

_PIP70 = "org.apache.pulsar.common.intercept."
STANDALONE_DEFAULTS = (
    Setting("brokerEntryMetadataInterceptors",
            f"{_PIP70}AppendBrokerTimestampMetadataInterceptor,{_PIP70}AppendIndexMetadataInterceptor",
            "standalone default"),
    Setting("exposingBrokerEntryMetadataToClientEnabled", "true", "standalone default"),
    Setting("functionsWorkerEnabled", "true", "standalone default"),
    Setting("transactionCoordinatorEnabled", "true", "standalone default"),
)
"""Where the standalone departs from broker.conf's defaults, as Pulsar's standalone.conf does
for other keys (it leaves these two at broker.conf's: none, false): PIP-70 on, so that what
magnetar builds on it (Spark streams and index offsets, `Message.index()`, seek by index)
works on the broker a newcomer starts first. Any source of settings beats them;
`-c brokerEntryMetadataInterceptors= -c exposingBrokerEntryMetadataToClientEnabled=false`
gives Pulsar's behaviour back. The functions worker is on, as Pulsar's standalone runs one
(`--no-functions-worker` turns it off). Transactions are on (Pulsar's standalone.conf leaves
them off): the exactly-once Spark sink, Kafka transactions and magnetar.client's
`new_transaction` then work on the first broker a newcomer starts, and a topic that never
sees a transaction pays nothing for it (docs/transactions.md has the figures);
`-c transactionCoordinatorEnabled=false` turns them off."""


def register(commands: argparse._SubParsersAction) -> None:
    standalone = commands.add_parser("standalone", help="run an embedded broker with its data on local disk",
                                     description="Run an embedded broker with its admin API, data on local disk.")
    standalone.set_defaults(run=run)
    standalone.add_argument("--data-dir", type=Path, default=Path("magnetar-data"), help="default ./magnetar-data")
    standalone.add_argument("--port", type=int, help="broker port (brokerServicePort, default 6650; 0 = any free)")
    standalone.add_argument("--http-port", type=int, help="admin HTTP port (webServicePort, default 8080)")
    standalone.add_argument("--bind", help="address to listen on (bindAddress, default 127.0.0.1)")
    standalone.add_argument("--no-functions-worker", action="store_true",
                            help="run no functions worker (functionsWorkerEnabled=false)")
    standalone.add_argument("--no-console", action="store_true",
                            help="serve no web console at / of the admin port (webConsoleEnabled=false)")
    standalone.add_argument("--config", type=Path, help="a Pulsar broker.conf or standalone.conf (Java properties)")
    standalone.add_argument("--kafka", type=int, nargs="?", const=9092, metavar="PORT",
                            help="also serve Kafka clients on PORT (default 9092; messagingProtocols=kafka, "
                                 "kafkaListeners=PLAINTEXT://<bind>:PORT)")
    standalone.add_argument(
        "-c", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="set one configuration key"
    )
    add_log_level(standalone, "INFO")


def _configuration(args: argparse.Namespace) -> LoadedConfiguration:
    flags = [Setting(key, str(value), flag) for key, value, flag in (
        ("brokerServicePort", args.port, "--port"), ("webServicePort", args.http_port, "--http-port"),
        ("bindAddress", args.bind, "--bind"),
        ("functionsWorkerEnabled", "false" if args.no_functions_worker else None, "--no-functions-worker"),
        ("webConsoleEnabled", "false" if args.no_console else None, "--no-console"),
    ) if value is not None]
    if args.kafka is not None:
        flags += [Setting("messagingProtocols", "kafka", "--kafka"),
                  Setting("kafkaListeners", f"PLAINTEXT://{args.bind or '127.0.0.1'}:{args.kafka}", "--kafka")]
    return standalone_configuration(args.config, args.overrides, environ=os.environ, flags=flags)


def standalone_configuration(
    config_file: Path | None = None,
    overrides: Iterable[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
    flags: Iterable[Setting] = (),
) -> LoadedConfiguration:
    """The configuration a standalone runs with. magnetar.testing builds its brokers' through
    here too, so that a test broker starts with whatever defaults the command has."""
    return load_configuration(config_file, overrides, environ=environ, flags=flags,
                              defaults=STANDALONE_DEFAULTS, check=check_features)


class Standalone:
    """A broker and its admin API on the running event loop: what `magnetar standalone` runs
    in its main thread, and magnetar.testing in a thread of a test process. Process-wide
    matters (signals, logging, limits, the garbage collector) are the command's, not this."""

    def __init__(self, config: ServiceConfiguration, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        self.service: BrokerService | None = None
        self.admin: AdminServer | None = None
        self.functions: FunctionsOnDemand | None = None
        self.replication: ReplicationService | None = None

    async def start(self) -> None:
        """Listen on both APIs; a failure half-way closes what had started (and the data
        dir's lock) before it is raised, so the process can try again."""
        try:
            self.service = BrokerService(self.config, self.data_dir)
            await self.service.start()
            log.info("binary protocol listener ready on %s (admin API starting)",
                     " and ".join(self.service.service_urls))
            self._start_replication_when_used()
            await self._start_admin()
        except BaseException:
            await self.stop()
            raise

    async def _start_admin(self) -> None:
        """The admin API's code loads in a thread (magnetar.admin, its HTTP server and the
        functions worker's routes: about a fifth of a start's CPU), so the event loop serves
        Pulsar clients on the binary port meanwhile."""
        modules = ["magnetar.admin.server", *(["magnetar.functions.on_demand"] if self.config.functionsWorkerEnabled
                                              else [])]
        with ThreadPoolExecutor(1, thread_name_prefix="magnetar-admin-import") as loader:  # gone when loaded
            await asyncio.get_running_loop().run_in_executor(loader, _import_all, modules)
        from magnetar.admin.server import AdminServer  # noqa: PLC0415  (loaded just above)

        assert self.service is not None
        self.admin = AdminServer(self.service)
        if self.config.functionsWorkerEnabled:
            from magnetar.functions.on_demand import FunctionsOnDemand  # noqa: PLC0415  (loaded just above)

            self.functions = FunctionsOnDemand(self.service, self.data_dir, self._endpoints)
            # Pulsar lets super users, tenant admins and roles granted `functions` on the namespace
            # manage functions
            self.admin.add_routes(self.functions.routes(), FUNCTIONS)
            self.admin.metrics_sources.append(self.functions.metrics)
        await self.admin.start(self.config.bindAddress, self.config.webServicePort, self.config.webServicePortTls)
        if self.functions is not None:
            await self.functions.start()

    def _start_replication_when_used(self) -> None:
        """Geo-replication loads (magnetar.replication, and the client it produces with) only
        once a namespace or a topic replicates to another cluster: now, or when one is set to."""
        assert self.service is not None
        resources, policies = self.service.resources, self.service.policies
        local = {resources.clusters.local}
        if any(_replicates(resources, namespace) for namespace in resources.all_namespaces()) \
                or any(set(value) - local for value in policies.topic_values(REPLICATION_CLUSTERS)):
            self._start_replication()
        else:
            resources.watch(self._namespace_may_replicate)
            policies.watch(self._topic_may_replicate)

    def _namespace_may_replicate(self, scope: str) -> None:
        if self.replication is None and self.service is not None and "/" in scope \
                and _replicates(self.service.resources, scope):
            self._start_replication()

    def _topic_may_replicate(self, topic: TopicName) -> None:
        service = self.service
        if self.replication is None and service is not None:
            clusters = service.policies.topic_value(topic, REPLICATION_CLUSTERS) or ()
            if set(clusters) - {service.resources.clusters.local}:
                self._start_replication()

    def _start_replication(self) -> None:
        from magnetar.replication import ReplicationService  # noqa: PLC0415  (only once a namespace replicates)

        assert self.service is not None
        self.replication = ReplicationService(self.service)
        self.replication.start()

    def _endpoints(self) -> Endpoints:
        """Where instances connect: the broker's and the admin API's advertised URLs."""
        from magnetar.functions.supervisor import Endpoints  # noqa: PLC0415  (with the worker)

        assert self.service is not None and self.admin is not None
        advertised = self.service.listeners.resolve(None)
        return Endpoints(advertised.broker_service_url or advertised.broker_service_url_tls, self.admin.http_url())

    async def stop(self) -> None:
        if self.functions is not None:
            await self.functions.stop()
            self.functions = None
        if self.admin is not None:
            await self.admin.stop()
            self.admin = None
        if self.replication is not None:
            self.replication.stop()
            self.replication = None
        if self.service is not None:
            service, self.service = self.service, None
            await service.stop()


def _replicates(resources: NamespaceResources, namespace: str) -> bool:
    """Whether `namespace` names a cluster other than this one to replicate to."""
    try:
        return bool(set(resources.replication_clusters(namespace)) - {resources.clusters.local})
    except BrokerServiceError:  # deleted meanwhile
        return False


def _import_all(modules: list[str]) -> None:
    for name in modules:
        importlib.import_module(name)


async def _run_standalone(config: ServiceConfiguration, data_dir: Path) -> None:
    standalone = Standalone(config, data_dir)
    await standalone.start()
    service, admin = standalone.service, standalone.admin
    assert service is not None and admin is not None
    for url in admin.bound_urls():
        log.info("admin API on %s/admin/v2", url)
    for url in admin.console_urls():
        log.info("web console on %s", url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    advertised = service.listeners.resolve(None)
    log.info("advertising %s to clients", advertised.broker_service_url or advertised.broker_service_url_tls)
    settle_after_start()
    log.info("magnetar standalone accepting connections on %s (data in %s)", " and ".join(service.service_urls),
             data_dir)
    try:
        await stop.wait()
    finally:
        log.info("stopping: closing connections, flushing ledgers and cursors")
        await standalone.stop()
        log.info("stopped cleanly")


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's when installed (the [fast] extra), else asyncio's with the accept fix of
    broker.accept_errors; a loop of its own, so no global policy changes. The choice is logged:
    an installation's users (and tests/test_fast_extra.py) see which one runs."""
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: PLC0415  (optional speed-up)

        log.info("event loop: uvloop %s (the [fast] extra)", uvloop.__version__)
        return uvloop.new_event_loop
    log.info("event loop: asyncio's (install the [fast] extra for uvloop)")
    return BrokerEventLoop


def _raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit: every connection and open ledger file
    is a descriptor, and the usual soft limit (1024) is far below what a broker may need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _NO_HARD_LIMIT_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("open files limit stays at %d: cannot raise it to %d: %s", soft, target, exc)
            return soft
        soft = target
    log.info("open files limit (RLIMIT_NOFILE): %d", soft)
    return soft


def _check_file_budget(config: ServiceConfiguration, open_files_limit: int) -> None:
    """Ledger files should leave most descriptors to connections (see managedLedgerMaxOpenFiles)."""
    if open_files_limit != resource.RLIM_INFINITY and config.managedLedgerMaxOpenFiles > open_files_limit // 2:
        log.warning(
            "managedLedgerMaxOpenFiles=%d is over half the open files limit (%d): connections may run out",
            config.managedLedgerMaxOpenFiles, open_files_limit,
        )


def run(args: argparse.Namespace) -> int:
    try:
        loaded = _configuration(args)
    except ConfigError as exc:
        print(f"magnetar: configuration error: {exc}", file=sys.stderr)
        return 2
    loaded.log_summary()
    _check_file_budget(loaded.config, _raise_open_files_limit())
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(_run_standalone(loaded.config, args.data_dir))
    except ConfigError as exc:
        print(f"magnetar: configuration error: {exc}", file=sys.stderr)
        return 2
    except DataDirLockedError as exc:
        print(f"magnetar standalone: data dir {exc.data_dir} is in use by another process (a standalone already "
              "running on it?): stop that one, or give this one its own --data-dir", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"magnetar: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0
