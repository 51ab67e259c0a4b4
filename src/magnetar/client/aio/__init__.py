"""The asyncio core of magnetar.client: `Client`, `Producer`, `Consumer`, `Reader`."""

from magnetar.client.aio.client import Client
from magnetar.client.aio.consumer import Consumer, ConsumerConfig
from magnetar.client.aio.letters import DeadLetterPolicy
from magnetar.client.aio.multi_consumer import MultiTopicsConsumer
from magnetar.client.aio.partitioned_producer import PartitionedProducer
from magnetar.client.aio.producer import Producer, ProducerConfig
from magnetar.client.aio.reader import Reader

__all__ = ["Client", "Consumer", "ConsumerConfig", "DeadLetterPolicy", "MultiTopicsConsumer", "PartitionedProducer",
           "Producer", "ProducerConfig", "Reader"]
