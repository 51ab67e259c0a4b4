"""The functions worker: deploys what the REST API is given (after checking in a child
process that the code loads, and that the deploying role may consume the inputs and
produce the outputs), keeps it in the metadata store, runs it under supervision as that
role, and brings every function back when the broker starts again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from magnetar.broker.auth.authorization import Resource
from magnetar.broker.auth.operations import GET_TOPICS, PRODUCE, SUBSCRIBE, Operation
from magnetar.broker.deduplication import DEDUPLICATION
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.functions import sandbox
from magnetar.functions.config import ConfigError, FunctionConfig
from magnetar.functions.stats_view import prometheus
from magnetar.functions.store import Deployment, FunctionStore
from magnetar.functions.supervisor import Endpoints, FunctionHome, FunctionRuntime, Launcher, check_code
from magnetar.wire.topic_name import InvalidTopicNameError, TopicName

log = logging.getLogger("magnetar.functions")
CHECK_SHARE_OF_BUDGET = 2 / 3
"""Loading the code may take this share of the admin API's request budget
(webServiceRequestTimeoutSeconds, 30 s by default), so a refusal says why in time."""
CONCURRENT_CHECKS = 2
"""Code checks running at once (each a Python process); more wait, within their budget."""


class FunctionNotFound(LookupError):
    pass


class FunctionsWorker:
    def __init__(self, service: BrokerService, data_dir: Path) -> None:
        self.service = service
        self.store = FunctionStore(service.metadata)
        self.home = data_dir / "functions"
        self.launcher: Launcher | None = None
        self.runtimes: dict[str, FunctionRuntime] = {}
        self.not_running: dict[str, str] = {}
        """Stored functions the worker could not run, and why (status says it)."""
        self._check_timeout = service.config.webServiceRequestTimeoutSeconds * CHECK_SHARE_OF_BUDGET
        self._checks = asyncio.Semaphore(CONCURRENT_CHECKS)

    async def start(self, endpoints: Endpoints) -> None:
        """Choose the isolation (and say which), then run every stored function (after a
        restart: whatever was deployed before it). One that cannot run is reported and left
        out; it never stops the others, nor the broker."""
        config = self.service.config
        isolation = await sandbox.choose(config.functionInstanceIsolation, config.functionInstanceUser,
                                         self.home.parent)
        log.log(logging.WARNING if isolation.kind == "none" else logging.INFO, "functions worker: instances are %s",
                isolation.describe())
        left = await asyncio.to_thread(sandbox.sweep, self.home) if sys.platform == "linux" else []
        if left:
            log.warning("functions worker: killed %d process(es) an earlier broker of this data directory left "
                        "running: %s", len(left), left)
        credentials = self.service.authentication.issued if self.service.authentication.enabled else None
        self.launcher = Launcher(endpoints, isolation, credentials, config.transactionCoordinatorEnabled)
        for fqfn in self.store.fqfns():
            try:
                await self._restore(fqfn)
            except Exception as error:  # a stored entry of any shape: reported, skipped
                self.not_running[fqfn] = f"not started: {error}"
                log.error("function %s not started: %s", fqfn, error)
        if self.runtimes:
            log.info("functions worker started %d function(s)", len(self.runtimes))

    async def _restore(self, fqfn: str) -> None:
        try:
            deployment = self.deployment(fqfn)
        except (ConfigError, KeyError, ValueError, TypeError) as error:  # stored by a version with other rules
            raise ConfigError(f"its stored config no longer loads ({error})") from None
        if deployment.config.fqfn != fqfn:
            raise ConfigError(f"its stored config names another function, {deployment.config.fqfn}")
        if self.service.authentication.enabled and deployment.role is None:
            raise ConfigError("it names no role to act as (deployed with authentication off): update it to "
                              "run it as the updating role")
        code = self.store.code(fqfn)
        if code is None:
            raise ConfigError("its code is missing")
        await self._run(deployment, code)

    async def stop(self) -> None:
        runtimes, self.runtimes = list(self.runtimes.values()), {}
        await asyncio.gather(*(runtime.stop() for runtime in runtimes))

    def metrics(self) -> str:
        return prometheus(list(self.runtimes.values()), self.service.config.clusterName)

    def deployment(self, fqfn: str) -> Deployment:
        deployment = self.store.get(fqfn)
        if deployment is None:
            raise FunctionNotFound(f"Function {fqfn} doesn't exist")
        return deployment

    def runtime(self, fqfn: str) -> FunctionRuntime:
        self.deployment(fqfn)
        runtime = self.runtimes.get(fqfn)
        if runtime is None:
            raise ConfigError(f"Function {fqfn} is not running: {self.not_running.get(fqfn, 'unknown')}")
        return runtime

    async def create(self, config: FunctionConfig, code: bytes, role: str | None) -> None:
        self._check_topics(config, role)
        namespace = f"{config.tenant}/{config.namespace}"
        if not self.service.resources.namespace_exists(namespace):
            raise ConfigError(f"Namespace {namespace} does not exist")
        await self._check_code(config, code)
        if self.store.get(config.fqfn) is not None:  # created by another request while the code loaded
            raise ConfigError(f"Function {config.name} already exists")
        deployment = Deployment(config, role=role)
        self.store.save(deployment, code)
        await self._run(deployment, code)

    async def update(self, fqfn: str, changes: dict[str, Any], code: bytes | None, role: str | None) -> None:
        """The function afterwards acts as `role`, the updating one (as Pulsar's function auth
        providers take the updating request's credentials): refused unless it may."""
        before = self.deployment(fqfn)
        config = before.config.merged(changes)
        for key in ("tenant", "namespace", "name"):
            if getattr(config, key) != getattr(before.config, key):
                raise ConfigError(f"{key} cannot change in an update")
        self._check_topics(config, role)
        stored_code = code if code is not None else self.store.code(fqfn)
        if stored_code is None:
            raise ConfigError(f"Function {fqfn} has no code stored: upload it with the update")
        await self._check_code(config, stored_code)
        deployment = Deployment(config, before.function_id, before.version + 1, before.stopped, role)
        self.store.save(deployment, stored_code)
        await self._stop_runtime(fqfn)
        await self._run(deployment, stored_code)

    async def _check_code(self, config: FunctionConfig, code: bytes) -> None:
        assert self.launcher is not None
        async with self._checks:
            await check_code(self.launcher, config, code, self._check_timeout)

    async def delete(self, fqfn: str) -> None:
        """Also a function whose stored config no longer loads (its subscription and files then
        stay: nothing it names is trusted)."""
        try:
            config: FunctionConfig | None = self.deployment(fqfn).config
        except (ConfigError, KeyError, ValueError, TypeError):
            config = None
        await self._stop_runtime(fqfn)
        self.not_running.pop(fqfn, None)
        self.store.delete(fqfn)
        if config is not None and config.fqfn == fqfn:
            await FunctionHome(self.home, config).remove()
            if config.cleanupSubscription:
                self._unsubscribe(config)

    def _unsubscribe(self, config: FunctionConfig) -> None:
        """Pulsar's cleanupSubscription (on by default): a deleted function's subscription goes
        too, so its inputs keep no backlog for nobody (a pattern's topics are left alone)."""
        for name in config.input_topics:
            topic = TopicName.parse(name)
            count = self.service.partitions_of(topic) or 0
            for partition in [topic.partition(i) for i in range(count)] if count else [topic]:
                with contextlib.suppress(BrokerServiceError):
                    loaded = self.service.get_topic(str(partition), create=False)
                    if isinstance(loaded, PersistentTopic) and config.subscription in loaded.subscriptions:
                        loaded.delete_subscription(config.subscription, force=True)

    async def set_running(self, fqfn: str, instance_id: int | None, running: bool) -> None:
        """start/stop: remembered in the store, so a stopped instance stays stopped after a restart."""
        runtime = self.runtime(fqfn)
        deployment = self.deployment(fqfn)
        instances = self.instances(runtime, instance_id)
        stopped = set(deployment.stopped)
        ids = {instance.instance_id for instance in instances}
        deployment.stopped = sorted(stopped - ids if running else stopped | ids)
        self.store.save(deployment, None)
        for instance in instances:
            instance.deployment.stopped = deployment.stopped
            if running:
                instance.start()
            else:
                await instance.stop()

    async def restart(self, fqfn: str, instance_id: int | None) -> None:
        runtime = self.runtime(fqfn)
        for instance in self.instances(runtime, instance_id):
            await instance.stop()
            if instance.instance_id not in runtime.deployment.stopped:
                instance.start()

    @staticmethod
    def instances(runtime: FunctionRuntime, instance_id: int | None) -> list[Any]:
        if instance_id is None:
            return runtime.instances
        if not 0 <= instance_id < len(runtime.instances):
            raise ConfigError(f"Invalid Instance Id {instance_id}")
        return [runtime.instances[instance_id]]

    @contextlib.contextmanager
    def acting_as(self, role: str | None, holder: str) -> Iterator[str | None]:
        """A credential acting as `role` while the block runs (a `trigger`'s client), None
        with authentication off."""
        assert self.launcher is not None
        credentials = self.launcher.credentials
        if credentials is None or role is None:
            yield None
            return
        credential = credentials.issue(role, holder)
        try:
            yield credential
        finally:
            credentials.revoke(credential)

    async def _run(self, deployment: Deployment, code: bytes) -> None:
        assert self.launcher is not None, "the worker runs functions once the broker and admin API listen"
        fqfn = deployment.config.fqfn
        home = FunctionHome(self.home, deployment.config)
        await home.write(code)
        self._prepare_output(deployment.config, self.launcher.transactions)
        runtime = FunctionRuntime(deployment, home, self.launcher)
        self.runtimes[fqfn] = runtime
        self.not_running.pop(fqfn, None)
        runtime.start()

    async def _stop_runtime(self, fqfn: str) -> None:
        runtime = self.runtimes.pop(fqfn, None)
        if runtime is not None:
            await runtime.stop()

    def _check_topics(self, config: FunctionConfig, role: str | None) -> None:
        """Valid topic names, and (authorization on) every topic the function will use allowed
        to `role`, which its instances act as: consume its inputs (or list a pattern's
        namespace), produce to its output, log and dead-letter topics. AuthorizationError
        (403) names the first one refused."""
        needs: list[tuple[Operation, Resource]] = []
        for name in config.input_topics:
            needs.append((SUBSCRIBE, Resource.of_topic(_topic(name))))
        if config.topicsPattern:
            needs.append((GET_TOPICS, Resource.of_namespace(_pattern_namespace(config.topicsPattern))))
        for name in (config.output, config.logTopic, config.dead_letter_topic):
            if name:
                needs.append((PRODUCE, Resource.of_topic(_topic(name))))
        for operation, resource in needs:
            self.service.authorization.check(operation, role, resource)

    def _prepare_output(self, config: FunctionConfig, transactions: bool) -> None:
        """EFFECTIVELY_ONCE without transactions needs the broker to deduplicate the output
        topic: turned on for that topic when nothing said otherwise. Decided each time an
        instance starts, by the mode it runs in: with transactions the check would cost every
        output message for nothing, and a broker restarted without the coordinator must still
        deduplicate a function deployed with it."""
        if config.processingGuarantees == "EFFECTIVELY_ONCE" and config.output and not transactions:
            topic = TopicName.parse(config.output)
            if self.service.policies.effective(topic, DEDUPLICATION) is not True:
                self.service.policies.set_topic_value(topic, DEDUPLICATION, True)


def _topic(name: str) -> TopicName:
    try:
        return TopicName.parse(name)
    except InvalidTopicNameError as error:
        raise ConfigError(f"invalid topic name {name!r}: {error}") from None


def _pattern_namespace(pattern: str) -> str:
    """The namespace a topics pattern lists (as the client reads it: the pattern is a topic
    name whose local part is a regular expression)."""
    try:
        return TopicName.parse(pattern).namespace_name
    except InvalidTopicNameError as error:
        raise ConfigError(f"topicsPattern must be a topic name whose last part is the regular expression "
                          f"(persistent://tenant/ns/regex): {error}") from None
