"""Kafka-listening brokers and a raw Kafka-protocol client for tests/kafka.

A module of its own rather than conftest.py: test files import these by name, and a bare
`from conftest import ...` takes whichever conftest an xdist worker imported first.
"""

from __future__ import annotations

import datetime
import re
import socket
import struct
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.metadata.v12 import request as metadata
from kio.schema.produce.v9 import request as produce
from standalone import Standalone

from magnetar.kafka.protocol.messages import decode_response, encode_request

KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")


class KafkaStandalone(Standalone):
    kafka_port: int = 0

    def start(self) -> KafkaStandalone:
        """Started, or restarted on the Kafka port it had, so clients carry on across the restart."""
        if self.kafka_port and "--kafka" in self.args:
            at = self.args.index("--kafka") + 1
            self.args = [*self.args[:at], str(self.kafka_port), *self.args[at + 1:]]
        super().start()
        self.kafka_port = int(KAFKA_READY.findall(self.log())[-1])
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"


def start_kafka_broker(data_dir: Path, *config: str) -> KafkaStandalone:
    return KafkaStandalone(data_dir, list(config), args=["--kafka", "0"]).start()


class RawKafka:
    """A Kafka connection speaking through magnetar's codec, for what real clients never send."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self._correlation = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive_frame(self) -> bytes | None:
        """The next response frame, or None once the broker has closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def _read(self, count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def call(self, api_key: int, version: int, body) -> object:
        self._correlation += 1
        self.send_raw(encode_request(api_key, version, self._correlation, "raw", body))
        frame = self.receive_frame()
        assert frame is not None, "the broker closed the connection"
        correlation, response = decode_response(frame, api_key, version)
        assert correlation == self._correlation
        return response

    def produce(self, topic: str, records: bytes, partition: int = 0) -> tuple[ErrorCode, int]:
        """(error, base offset) of a Produce (acks=all) of `records` to a partition of `topic`."""
        (answer,) = self.call(0, 9, produce_request(topic, records, partition=partition)).responses
        (partition,) = answer.partition_responses
        return partition.error_code, partition.base_offset

    def latest(self, topic: str) -> int:
        """Partition 0's end offset (ListOffsets, latest)."""
        request = list_offsets.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            list_offsets.ListOffsetsTopic(name=topic, partitions=(
                list_offsets.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
        ((partition,),) = (t.partitions for t in self.call(2, 7, request).topics)
        return partition.offset

    def init_producer(self) -> tuple[int, int]:
        """(producer id, epoch) from InitProducerId, as an idempotent producer starts."""
        ids = self.call(22, 4, init_producer_id.InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1))
        return ids.producer_id, ids.producer_epoch

    def create_topic(self, name: str) -> None:
        """`name` with one partition, created by a Metadata request (auto-creation)."""
        request = metadata.MetadataRequest(topics=(metadata.MetadataRequestTopic(name=name, topic_id=None),),
                                           allow_auto_topic_creation=True, include_topic_authorized_operations=False)
        (topic,) = self.call(3, 12, request).topics
        assert topic.error_code == ErrorCode.none and len(topic.partitions) == 1

    def close(self) -> None:
        self.sock.close()


def batch(values: list[bytes], producer: tuple[int, int, int] = (-1, -1, -1), *, transactional: bool = False) -> bytes:
    """One record batch of `values`, from (producer id, epoch, base sequence)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                        producer_id=producer[0],
                                        producer_epoch=producer[1], base_sequence=producer[2], batch_size=1 << 24)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_request(topic: str, records: bytes, acks: int = -1, partition: int = 0) -> produce.ProduceRequest:
    return produce.ProduceRequest(acks=acks, timeout=datetime.timedelta(seconds=10), topic_data=(
        produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=partition, records=records),)),))
