"""Kafka in the test's own process, for tests whose code under test must run there (mutation
testing, scripts/mutation.py), in two forms:

- the Kafka APIs over an in-process BrokerService (no network, no listener): requests built with
  kio and handed to KafkaApis as a connection would, on the test's own event loop
  (`run_in_process`). The storage's sync thread is real, so a test can hold a write in flight
  (`held_writes`) and look at what readers see meanwhile;
- a whole broker with its Kafka listeners (magnetar.testing's InProcessBroker), for raw clients
  on a socket (`start`).

A module of its own: test files import it by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.produce.v9 import request as produce

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.service.protocol_handlers import HandlerBroker
from magnetar.broker.topics.loop_bridge import LoopBridge
from magnetar.kafka.access import Access
from magnetar.kafka.apis import KafkaApis
from magnetar.kafka.protocol.messages import Request, decode_response, encode_response
from magnetar.kafka.topics import KafkaTopics
from magnetar.storage import StorageError
from magnetar.testing import InProcessBroker

INTERCEPTORS = ["org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",
                "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor"]
EARLIEST, LATEST = -2, -1
_LISTENER = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+) \((\w+)\)")


class InProcessKafka:
    def __init__(self, service: BrokerService, apis: KafkaApis) -> None:
        self.service = service
        self.apis = apis
        self.access: Access = apis.access(None, ("127.0.0.1", 9092))
        self._correlation = 0

    def request(self, api_key: int, version: int, body: Any) -> Request:
        self._correlation += 1
        return Request(api_key, version, self._correlation, "in-process", body)

    async def call(self, api_key: int, version: int, body: Any) -> Any:
        """The response body, as a client would decode it (a produce answers with encoded bytes)."""
        answer = self.apis.handle(self.request(api_key, version, body), self.access)
        if asyncio.isfuture(answer) or asyncio.iscoroutine(answer):
            answer = await answer
        if isinstance(answer, bytes):
            answer = decode_response(encode_response(api_key, version, 0, answer)[4:], api_key, version)[1]
        return answer

    def produce(self, topic: str, partition: int, records: bytes) -> asyncio.Task[tuple[ErrorCode, int]]:
        """A Produce (acks=all) started now: the task ends with (error, base offset) once it is answered."""
        async def answered() -> tuple[ErrorCode, int]:
            request = produce.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
                produce.TopicProduceData(name=topic, partition_data=(
                    produce.PartitionProduceData(index=partition, records=records),)),))
            ((answer,),) = (t.partition_responses for t in (await self.call(0, 9, request)).responses)
            return answer.error_code, answer.base_offset

        return asyncio.ensure_future(answered())

    async def fetch(self, topic: str, offsets: dict[int, int], *, max_wait: float = 0.0, max_bytes: int = 1 << 20,
                    partition_max_bytes: int = 1 << 20) -> dict[int, Any]:
        """partition -> PartitionData of one Fetch v12 at `offsets` (partition -> fetch offset)."""
        request = fetch_request(topic, offsets, max_wait=max_wait, max_bytes=max_bytes,
                                partition_max_bytes=partition_max_bytes)
        response = await self.call(1, 12, request)
        return {p.partition_index: p for t in response.responses for p in t.partitions}

    def list_offsets(self, topic: str, partitions: list[int], timestamp: int) -> dict[int, Any]:
        """partition -> ListOffsetsPartitionResponse of one ListOffsets v7."""
        request = list_offsets.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            list_offsets.ListOffsetsTopic(name=topic, partitions=tuple(
                list_offsets.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
                for p in partitions)),))
        answer = self.apis.handle(self.request(2, 7, request), self.access)
        return {p.partition_index: p for t in answer.topics for p in t.partitions}


def fetch_request(topic: str, offsets: dict[int, int], *, max_wait: float = 0.0, max_bytes: int = 1 << 20,
                  partition_max_bytes: int = 1 << 20, isolation_level: int = 0) -> fetch.FetchRequest:
    return fetch.FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(seconds=max_wait), min_bytes=1,
        max_bytes=max_bytes, isolation_level=isolation_level, session_id=0, session_epoch=-1, topics=(
            fetch.FetchTopic(topic=topic, partitions=tuple(fetch.FetchPartition(
                partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=partition_max_bytes) for p, o in offsets.items())),),
        forgotten_topics_data=(), rack_id="")


@contextlib.asynccontextmanager
async def in_process_kafka(data_dir: Path, **config: Any) -> AsyncIterator[InProcessKafka]:
    """KafkaApis on a BrokerService of its own, with PIP-70 offsets; run inside the test's event loop."""
    configuration = ServiceConfiguration(brokerEntryMetadataInterceptors=INTERCEPTORS, **config)
    service = BrokerService(configuration, data_dir)
    service.context.bridge = LoopBridge(asyncio.get_running_loop())
    apis = KafkaApis(KafkaTopics(HandlerBroker(service)), configuration)
    try:
        yield InProcessKafka(service, apis)
    finally:
        apis.groups.stop()
        for topic in list(service.topics.values()):
            with contextlib.suppress(StorageError):  # a ledger a test made fail cannot save its state
                topic.close()
        service.factory.close()


@contextlib.contextmanager
def held_writes(service: BrokerService) -> Iterator[threading.Event]:
    """Nothing becomes durable until the block ends (or the event is set): the storage's sync
    thread waits on it before it writes what is queued."""
    release = threading.Event()
    service.factory.schedule_commit(release.wait)
    try:
        yield release
    finally:
        release.set()


def run_in_process(data_dir: Path, test: Callable[[InProcessKafka], Awaitable[None]], **config: Any) -> None:
    """`test` on a fresh in-process KafkaApis (with these broker settings), on an event loop of its own."""
    async def run() -> None:
        async with in_process_kafka(data_dir, **config) as kafka:
            await asyncio.wait_for(test(kafka), 60)  # an answer that never comes fails, not hangs

    asyncio.run(run())


class _Ports(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.ports: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        found = _LISTENER.search(record.getMessage())
        if found:
            self.ports[found.group(2)] = int(found.group(1))


def start(config: dict[str, Any]) -> tuple[InProcessBroker, dict[str, int]]:
    """A started broker with `config` (and a Kafka listener unless it names one) and its Kafka
    ports by listener protocol."""
    ports = _Ports()
    logger = logging.getLogger("magnetar.kafka.handler")
    logger.addHandler(ports)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        broker = InProcessBroker({"messagingProtocols": "kafka", "kafkaListeners": "PLAINTEXT://127.0.0.1:0",
                                  **config}).start()
    finally:
        logger.removeHandler(ports)
        logger.setLevel(previous)
    return broker, ports.ports
