"""The functions worker: deploys what the REST API is given (after checking in a child
process that the code loads), keeps it in the metadata store, runs it under supervision and
brings every function back when the broker starts again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from magnetar.admin.metrics import CLUSTER
from magnetar.broker.deduplication import DEDUPLICATION
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.functions.config import ConfigError, FunctionConfig
from magnetar.functions.stats_view import prometheus
from magnetar.functions.store import Deployment, FunctionStore
from magnetar.functions.supervisor import Endpoints, FunctionRuntime, check_code
from magnetar.wire.topic_name import InvalidTopicNameError, TopicName

log = logging.getLogger("magnetar.functions")
CHECK_SHARE_OF_BUDGET = 2 / 3
"""Loading the code may take this share of the admin API's request budget
(webServiceRequestTimeoutSeconds, 30 s by default), so a refusal says why in time."""


class FunctionNotFound(LookupError):
    pass


class FunctionsWorker:
    def __init__(self, service: BrokerService, data_dir: Path) -> None:
        self.service = service
        self.store = FunctionStore(service.metadata)
        self.home = data_dir / "functions"
        self.endpoints: Endpoints | None = None
        self.runtimes: dict[str, FunctionRuntime] = {}
        self._check_timeout = service.config.webServiceRequestTimeoutSeconds * CHECK_SHARE_OF_BUDGET

    async def start(self, endpoints: Endpoints) -> None:
        """Run every stored function (after a restart: whatever was deployed before it)."""
        self.endpoints = endpoints
        for fqfn in self.store.fqfns():
            try:
                deployment = self.deployment(fqfn)
            except (ConfigError, KeyError, ValueError) as error:  # stored by a version with other rules
                log.error("function %s not started: its stored config no longer loads (%s)", fqfn, error)
                continue
            code = self.store.code(fqfn)
            if code is not None:
                self._run(deployment, code)
        if self.runtimes:
            log.info("functions worker started %d function(s)", len(self.runtimes))

    async def stop(self) -> None:
        runtimes, self.runtimes = list(self.runtimes.values()), {}
        await asyncio.gather(*(runtime.stop() for runtime in runtimes))

    def metrics(self) -> str:
        return prometheus(list(self.runtimes.values()), CLUSTER)

    def deployment(self, fqfn: str) -> Deployment:
        deployment = self.store.get(fqfn)
        if deployment is None:
            raise FunctionNotFound(f"Function {fqfn} doesn't exist")
        return deployment

    def runtime(self, fqfn: str) -> FunctionRuntime:
        self.deployment(fqfn)
        return self.runtimes[fqfn]

    async def create(self, config: FunctionConfig, code: bytes) -> None:
        self._check_topics(config)
        namespace = f"{config.tenant}/{config.namespace}"
        if not self.service.resources.namespace_exists(namespace):
            raise ConfigError(f"Namespace {namespace} does not exist")
        await check_code(config, code, self._check_timeout)
        if self.store.get(config.fqfn) is not None:  # created by another request while the code loaded
            raise ConfigError(f"Function {config.name} already exists")
        deployment = Deployment(config)
        self._prepare_output(config)
        self.store.save(deployment, code)
        self._run(deployment, code)

    async def update(self, fqfn: str, changes: dict[str, Any], code: bytes | None) -> None:
        before = self.deployment(fqfn)
        config = before.config.merged(changes)
        for key in ("tenant", "namespace", "name"):
            if getattr(config, key) != getattr(before.config, key):
                raise ConfigError(f"{key} cannot change in an update")
        self._check_topics(config)
        stored_code = code if code is not None else self.store.code(fqfn)
        assert stored_code is not None
        await check_code(config, stored_code, self._check_timeout)
        deployment = Deployment(config, before.function_id, before.version + 1, before.stopped)
        self._prepare_output(config)
        self.store.save(deployment, code)
        await self._stop_runtime(fqfn)
        self._run(deployment, stored_code)

    async def delete(self, fqfn: str) -> None:
        """Also a function whose stored config no longer loads (its subscription then stays)."""
        try:
            config: FunctionConfig | None = self.deployment(fqfn).config
        except (ConfigError, KeyError, ValueError):
            config = None
        await self._stop_runtime(fqfn)
        self.store.delete(fqfn)
        if config is not None and config.cleanupSubscription:
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
        deployment = self.deployment(fqfn)
        ids = range(deployment.config.parallelism) if instance_id is None else [instance_id]
        stopped = set(deployment.stopped)
        stopped = stopped - set(ids) if running else stopped | set(ids)
        deployment.stopped = sorted(stopped)
        self.store.save(deployment, None)
        runtime = self.runtimes[fqfn]
        for instance in self.instances(runtime, instance_id):
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

    def _run(self, deployment: Deployment, code: bytes) -> None:
        assert self.endpoints is not None, "the worker runs functions once the broker and admin API listen"
        fqfn = deployment.config.fqfn
        runtime = FunctionRuntime(deployment, code, self.home / fqfn, self.endpoints)
        self.runtimes[fqfn] = runtime
        runtime.start()

    async def _stop_runtime(self, fqfn: str) -> None:
        runtime = self.runtimes.pop(fqfn, None)
        if runtime is not None:
            await runtime.stop()

    @staticmethod
    def _check_topics(config: FunctionConfig) -> None:
        for topic in [*config.input_topics, config.output, config.logTopic, config.deadLetterTopic]:
            if topic:
                try:
                    TopicName.parse(topic)
                except InvalidTopicNameError as error:
                    raise ConfigError(f"invalid topic name {topic!r}: {error}") from None

    def _prepare_output(self, config: FunctionConfig) -> None:
        """EFFECTIVELY_ONCE needs the broker to deduplicate the output topic: turned on for
        that topic when nothing said otherwise."""
        if config.processingGuarantees == "EFFECTIVELY_ONCE" and config.output:
            topic = TopicName.parse(config.output)
            if self.service.policies.effective(topic, DEDUPLICATION) is not True:
                self.service.policies.set_topic_value(topic, DEDUPLICATION, True)

