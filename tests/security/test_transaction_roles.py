"""Transactions (PIP-31) with authorization on: any role reaches the coordinator, and a
transaction belongs to the role that opened it. Another role can neither end it, nor add
to it, nor send or acknowledge in it; a super user may end it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from rawclient import RawClient
from security_helpers import AUTHZ_SETTINGS, TokenSigner, admin_json, build_scene
from standalone import Standalone

import magnetar.client
from magnetar.client import AuthenticationToken
from magnetar.wire.entry import build_entry
from magnetar.wire.frames import encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


@pytest.fixture(scope="module")
def broker(signer: TokenSigner, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    started = Standalone(tmp_path_factory.mktemp("txn-roles") / "data",
                         [*AUTHZ_SETTINGS, signer.setting, "transactionCoordinatorEnabled=true"]).start()
    build_scene(started.admin_url, signer)
    yield started
    started.stop()


def _client(broker: Standalone, signer: TokenSigner, role: str) -> magnetar.client.Client:
    return magnetar.client.Client(broker.url, authentication=AuthenticationToken(signer.token(role)),
                                  enable_transaction=True, operation_timeout_seconds=10)


def _raw_as(broker: Standalone, signer: TokenSigner, role: str) -> RawClient:
    raw = RawClient(broker.url)
    raw.connect("token", signer.token(role).encode())
    return raw


def _end(raw: RawClient, txn_id: tuple[int, int], request_id: int) -> pb.CommandEndTxnResponse:
    most, least = txn_id
    raw.command(T(type=T.END_TXN, endTxn=pb.CommandEndTxn(request_id=request_id, txnid_most_bits=most,
                                                          txnid_least_bits=least, txn_action=pb.ABORT)))
    return raw.expect(T.END_TXN_RESPONSE).endTxnResponse


def test_a_transaction_belongs_to_the_role_that_opened_it(broker: Standalone, signer: TokenSigner) -> None:
    topic = f"persistent://t1/ns/txn-{uuid.uuid4().hex[:8]}"
    with _client(broker, signer, "app") as app, _client(broker, signer, "admin") as admin:
        consumer = admin.subscribe(topic, "check")
        txn = app.new_transaction(timeout=30)  # a role without grants in pulsar/system reaches the coordinator
        app.create_producer(topic).send(b"mine", txn=txn)
        stranger = _raw_as(broker, signer, "ingest")  # may produce on t1/ns, but not in app's transaction
        try:
            stranger.create_producer(topic)
            metadata = pb.MessageMetadata(producer_name="raw", sequence_id=0, publish_time=1,
                                          txnid_most_bits=txn.txn_id[0], txnid_least_bits=txn.txn_id[1])
            send = pb.CommandSend(producer_id=0, sequence_id=0, txnid_most_bits=txn.txn_id[0],
                                  txnid_least_bits=txn.txn_id[1])
            stranger.write(encode_payload_command(T(type=T.SEND, send=send), build_entry(metadata, b"theirs")))
            assert stranger.expect(T.SEND_ERROR).send_error.error == pb.AuthorizationError
            assert _end(stranger, txn.txn_id, 1).error == pb.AuthorizationError
        finally:
            stranger.close()
        txn.commit()  # untouched by the stranger's attempts
        other = app.new_transaction(timeout=30)
        app.create_producer(topic).send(b"aborted by a super user", txn=other)
        superuser = _raw_as(broker, signer, "admin")
        try:
            answer = _end(superuser, other.txn_id, 2)
            assert not answer.HasField("error"), answer.message
        finally:
            superuser.close()
        assert consumer.receive(10_000).data() == b"mine"
        with pytest.raises(magnetar.client.errors.Timeout):
            consumer.receive(300)


def test_transaction_stats_are_a_super_users_and_a_topics_its_tenant_admins(broker: Standalone,
                                                                              signer: TokenSigner) -> None:
    """As in Pulsar: the coordinator's stats a super user's, a topic's buffer and pending
    acks its tenant admin's; a role that only produces and consumes gets neither."""
    topic = f"t1/ns/txn-stats-{uuid.uuid4().hex[:8]}"
    with _client(broker, signer, "app") as app:
        app.create_producer(f"persistent://{topic}").send(b"x")
        app.subscribe(f"persistent://{topic}", "sub")
        coordinator = "/admin/v3/transactions/coordinatorStats"
        buffer = f"/admin/v3/transactions/transactionBufferStats/{topic}"
        pending = f"/admin/v3/transactions/pendingAckStats/{topic}/sub"
        for role, allowed in (("admin", {coordinator, buffer, pending}), ("t1-admin", {buffer, pending}),
                              ("app", set())):
            for path in (coordinator, buffer, pending):
                status, body = admin_json("GET", broker.admin_url + path, signer.bearer(role))
                assert status == (200 if path in allowed else 403), (role, path, status, body)
