"""Issue 40 items 5-7: one hostile Kafka client must not take the broker down. Raw sockets, as the attacker.

- One Fetch naming a partition 200 times read it 200 times (79 -> 260 MB): a partition is
  read once and the response stops at max_bytes.
- 300 pipelined 1 MiB Fetches never read grew the broker by 560 MB: a connection is handled
  one request at a time and not read while its answers are not taken.
- Before authentication frames were buffered in full (40 x 5.3 MB) and connections were
  unlimited and never idle: frames are capped at 512 KiB (Kafka's sasl.server.max.receive.size)
  before authentication, Kafka connections count against brokerMaxConnections(PerIp), and
  connectionMaxIdleMs closes idle ones.

Each test checks the broker's memory (VmRSS) and that an unrelated admin request is still
answered; what the attacks cost in latency is measured by benchmarks/kafka_attacks_bench.py.
"""

from __future__ import annotations

import contextlib
import datetime
import secrets
import socket
import struct
from collections.abc import Iterator

import jwt
import pytest
from admin_http import http
from floods import flood_until_blocked
from kafka_brokers import KafkaStandalone, RawKafka, batch, start_kafka_broker
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4 import request as fetch_v4
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate
from kio.schema.sasl_handshake.v1 import request as sasl_handshake
from polling import wait_for
from procfs import rss_kb
from standalone import Standalone

from magnetar.kafka.protocol.messages import decode_response, encode_request

MB = 1024 * 1024
FILLED = "filled"
SASL_LISTENER = "SASL_PLAINTEXT://127.0.0.1:0"


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[KafkaStandalone]:
    started = start_kafka_broker(tmp_path_factory.mktemp("hostile"))
    raw = RawKafka(started.bootstrap)
    raw.create_topic(FILLED)
    for _ in range(4 * 64):  # 4 MiB in 16 KB batches
        assert raw.produce(FILLED, batch([b"x" * 1000] * 16))[0] == 0
    raw.close()
    yield started
    started.stop()


def _fetch(partitions: int, max_bytes: int, partition_max: int) -> fetch_v4.FetchRequest:
    return fetch_v4.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=max_bytes,
                                 isolation_level=0, topics=(fetch_v4.FetchTopic(topic=FILLED, partitions=tuple(
                                     fetch_v4.FetchPartition(partition=0, fetch_offset=0,
                                                             partition_max_bytes=partition_max)
                                     for _ in range(partitions))),))


def _admin_answers(broker: Standalone, headers: dict[str, str] | None = None) -> bool:
    status, _, _ = http("GET", f"{broker.admin_url}/admin/v2/clusters", headers=headers or {})
    return status == 200


def _grown_mb(broker: Standalone, before_kb: int) -> float:
    return (rss_kb(broker.proc.pid) - before_kb) / 1024


def test_a_fetch_naming_a_partition_200_times_reads_it_once_up_to_max_bytes(broker) -> None:
    raw = RawKafka(broker.bootstrap)
    before = rss_kb(broker.proc.pid)
    for correlation in range(5):
        raw.send_raw(encode_request(1, 4, correlation, "attacker", _fetch(200, 64 * 1024, MB)))
        _, response = decode_response(raw.receive_frame(), 1, 4)
        ((partition,),) = (topic.partitions for topic in response.responses)
        assert partition.error_code == 0 and 48 * 1024 <= len(partition.records) <= 64 * 1024  # 16 KB batches
    raw.close()
    grown = _grown_mb(broker, before)
    assert grown < 30, f"broker RSS +{grown:.0f} MB"
    assert _admin_answers(broker)


def test_a_fetch_answers_the_first_batch_whole_and_no_more_once_max_bytes_is_used(broker) -> None:
    raw = RawKafka(broker.bootstrap)
    for max_bytes, expected in ((1, 1), (20 * 1024, 1), (40 * 1024, 2)):
        raw.send_raw(encode_request(1, 4, 1, "small", _fetch(1, max_bytes, MB)))
        _, response = decode_response(raw.receive_frame(), 1, 4)
        ((partition,),) = (topic.partitions for topic in response.responses)
        assert len(partition.records) // (16 * 1000) == expected, (max_bytes, len(partition.records))
    raw.close()


def test_pipelined_fetches_whose_answers_are_never_read_do_not_pile_up_in_the_broker(broker) -> None:
    """300 fetches of 1 MiB each, answers unread: once the first answer is on its way the broker
    holds about one more (the transport's buffer), not 300."""
    before = rss_kb(broker.proc.pid)
    with socket.create_connection(("127.0.0.1", broker.kafka_port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"".join(encode_request(1, 4, n, "attacker", _fetch(1, MB, MB)) for n in range(300)))
        sock.settimeout(30)
        assert sock.recv(4, socket.MSG_PEEK)  # the broker is answering
        assert not wait_for(lambda: _grown_mb(broker, before) > 40, timeout=5), \
            f"broker RSS +{_grown_mb(broker, before):.0f} MB with 300 fetches unread"
        assert _admin_answers(broker)


def test_pipelined_requests_are_answered_in_order_one_at_a_time(broker) -> None:
    """A Fetch that long-polls holds back the ApiVersions pipelined behind it, as Kafka's brokers do."""
    raw = RawKafka(broker.bootstrap)
    waiting = fetch_v4.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(seconds=1), min_bytes=1 << 30,
                                    max_bytes=MB, isolation_level=0, topics=(fetch_v4.FetchTopic(
                                        topic=FILLED, partitions=(fetch_v4.FetchPartition(
                                            partition=0, fetch_offset=0, partition_max_bytes=1024),)),))
    versions = api_versions.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    raw.send_raw(encode_request(1, 4, 1, "t", waiting) + encode_request(18, 3, 2, "t", versions))
    assert [struct.unpack_from(">i", raw.receive_frame())[0] for _ in range(2)] == [1, 2]
    raw.close()


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory) -> Iterator[tuple[Standalone, int, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("hostile-sasl")
    key = secrets.token_bytes(32)
    (directory / "secret.key").write_bytes(key)
    started = Standalone(directory / "data", [
        "authenticationEnabled=true", "authenticationProviders=token", "superUserRoles=admin",
        f"tokenSecretKey=file://{directory / 'secret.key'}", "messagingProtocols=kafka",
        f"kafkaListeners={SASL_LISTENER}", "brokerMaxConnectionsPerIp=60", "connectionMaxIdleMs=2000"]).start()
    port = int(started.log().split("Kafka listener on 127.0.0.1:")[1].split(" ")[0])
    yield started, port, {"Authorization": f"Bearer {jwt.encode({'sub': 'admin'}, key, algorithm='HS256')}"}
    started.stop()


def _connect(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]


def _closed_by_broker(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_before_authentication_a_frame_over_512_kib_closes_the_connection_unread(sasl_broker) -> None:
    broker, port, admin = sasl_broker
    before = rss_kb(broker.proc.pid)
    connections = _connect(port, 40)
    for sock in connections:
        sock.sendall(struct.pack(">i", 5 * MB))
        with contextlib.suppress(OSError):  # the broker closes before most of it arrives
            sock.sendall(b"\0" * MB)
        sock.settimeout(10)
    assert all(_closed_by_broker(sock) for sock in connections)
    for sock in connections:
        sock.close()
    assert _grown_mb(broker, before) < 30
    assert "sasl.server.max.receive.size" in broker.log()
    assert _admin_answers(broker, admin)


def test_unauthenticated_connections_are_limited_per_address_and_closed_when_idle(sasl_broker) -> None:
    broker, port, admin = sasl_broker
    connections = _connect(port, 100)
    for sock in connections:
        sock.settimeout(0.5)
    refused = sum(_closed_by_broker(sock) for sock in connections)
    assert refused >= 40  # brokerMaxConnectionsPerIp=60 (with the admin probe's own)
    for sock in connections:
        sock.settimeout(15)
    assert all(_closed_by_broker(sock) for sock in connections)  # connectionMaxIdleMs=2000
    for sock in connections:
        sock.close()
    assert "idle for 2000 ms (connectionMaxIdleMs); closing" in broker.log()
    assert _admin_answers(broker, admin)


def test_pipelined_api_versions_before_authentication_are_not_read_while_unanswered(sasl_broker) -> None:
    """A flood of ApiVersions (allowed before authentication) whose answers are never read: the
    broker stops reading it once its answers wait, so the sender blocks long before 64 MB."""
    broker, port, admin = sasl_broker
    before = rss_kb(broker.proc.pid)
    thousand = encode_request(18, 3, 1, "attacker", api_versions.ApiVersionsRequest(
        client_software_name="a", client_software_version="1")) * 1000
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(3)
        sent, blocked = flood_until_blocked(sock, thousand, 64 * MB)
        assert blocked, f"the broker read {sent // MB} MB of requests from a client that reads no answer"
        assert _grown_mb(broker, before) < 30
        assert _admin_answers(broker, admin)


def test_nothing_pipelined_after_a_refused_authentication_is_answered(sasl_broker) -> None:
    _, port, _ = sasl_broker
    raw = RawKafka(f"127.0.0.1:{port}")
    versions = api_versions.ApiVersionsRequest(client_software_name="a", client_software_version="1")
    raw.send_raw(encode_request(17, 1, 1, "a", sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN"))
                 + encode_request(36, 2, 2, "a", sasl_authenticate.SaslAuthenticateRequest(
                     auth_bytes=b"\0public/default\0token:not-a-token"))
                 + encode_request(18, 3, 3, "a", versions))
    _, handshake = decode_response(raw.receive_frame(), 17, 1)
    _, refused = decode_response(raw.receive_frame(), 36, 2)
    assert (handshake.error_code, refused.error_code) == (ErrorCode.none, ErrorCode.sasl_authentication_failed)
    assert raw.receive_frame() is None  # closed: the ApiVersions behind it is never answered
    raw.close()
