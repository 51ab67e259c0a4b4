"""A ledger whose write fails for a reason other than a full disk (EIO, EFBIG) takes no
further append. The topic is closed and loaded again with a new ledger, as Pulsar's managed
ledger starts a new ledger after a failed write: its producers send again what had no
receipt, the other topics on the same connection are not disturbed, and stopping the broker
still persists everyone's state."""

from __future__ import annotations

import re

import pulsar
import pytest
from standalone import Standalone

import magnetar.client

LIMIT = 2 << 20
"""Every file the broker writes is capped here: a ledger file reaching it fails with EFBIG."""
SIZE = 256 << 10


@pytest.mark.parametrize("module", [pulsar, magnetar.client], ids=["official", "magnetar"])
@pytest.mark.parametrize("config", [
    ["brokerDeduplicationEnabled=true"],  # dedup snapshots its state into the ledger's properties at stop
    [],  # PIP-70's index is saved there too (on by default in the standalone)
], ids=["dedup", "default"])
def test_a_topic_whose_ledger_failed_a_write_goes_on_with_a_new_ledger(tmp_path, config, module, brokers):
    broker = Standalone(tmp_path / "data", config, file_size_limit=LIMIT)
    brokers.append(broker.start())
    client = module.Client(broker.url, operation_timeout_seconds=10)
    count = 5 * LIMIT // 2 // SIZE  # past the limit twice
    try:
        healthy = "persistent://public/default/healthy"
        producer = client.create_producer(healthy, batching_enabled=False)
        for i in range(10):
            producer.send(str(i).encode())
        consumer = client.subscribe(healthy, "sub", initial_position=module.InitialPosition.Earliest)
        for _ in range(6):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        doomed = client.create_producer("persistent://public/default/doomed", batching_enabled=False,
                                        send_timeout_millis=30_000)
        for i in range(count):
            doomed.send(b"%04d" % i + b"x" * SIZE)
        assert len(re.findall(r"write failed, refusing further appends: \[Errno 27\]", broker.log())) >= 2
        producer.send(b"after")
        assert len(re.findall(r"\] connected: ", broker.log())) == 1, "the shared connection was never dropped"
    finally:
        client.close()
    assert broker.stop() == 0, broker.log()
    assert "Traceback" not in broker.log(), broker.log()

    broker = Standalone(tmp_path / "data", config)
    brokers.append(broker.start())
    client = module.Client(broker.url)
    try:
        consumer = client.subscribe(healthy, "sub")
        got = [consumer.receive(timeout_millis=5000).data() for _ in range(5)]
        assert got == [b"6", b"7", b"8", b"9", b"after"], "the acks made before the stop were kept"
        reader = client.create_reader("persistent://public/default/doomed", module.MessageId.earliest)
        stored = [reader.read_next(timeout_millis=5000).data()[:4] for _ in range(count)]
        assert stored == [b"%04d" % i for i in range(count)], "each message stored once, in order"
        assert not reader.has_message_available()
    finally:
        client.close()
