"""The asyncio core of magnetar.client: `Client`, `Producer`, `Consumer`, `Reader`.

Layering (the contract `client-aio-layers` in pyproject.toml, annotation-only imports
included), highest first: `client` (the only module that imports the Client: it builds a
`ClientContext` and creates every handle); the handles over several handlers
(`multi_consumer`, `reader`, `partitioned_producer`); the handlers (`consumer`, `producer`);
the parts a consumer owns (`intake`, `redelivery`, `receiver`, `acks`) and a producer's SEND
ops, which never import their owner; `handler`; the configurations, `letters` and the
receiver queues; `context` (what handlers see of the client); `lookup`, `pool`,
`connection`. Like the rest of magnetar.client it imports only magnetar.wire,
magnetar.formats and magnetar.credentials from outside the package.
"""

from magnetar.client.aio.client import Client
from magnetar.client.aio.consumer import Consumer, ConsumerConfig
from magnetar.client.aio.letters import DeadLetterPolicy
from magnetar.client.aio.multi_consumer import MultiTopicsConsumer
from magnetar.client.aio.partitioned_producer import PartitionedProducer
from magnetar.client.aio.producer import Producer, ProducerConfig
from magnetar.client.aio.reader import Reader

__all__ = ["Client", "Consumer", "ConsumerConfig", "DeadLetterPolicy", "MultiTopicsConsumer", "PartitionedProducer",
           "Producer", "ProducerConfig", "Reader"]
