"""SASL/PLAIN and per-request authorization on a Kafka listener, exchange by exchange, with the
broker in this process (mutation testing of sasl.py and access.py): which namespace a user
name chooses, every refusal's error and words, and what each role may do."""

from __future__ import annotations

import base64
import datetime
import logging
import secrets
import time
import uuid
from collections.abc import Iterator

import jwt
import pytest
from admin_http import admin_call
from kafka_brokers import RawKafka, batch
from kafka_in_process import start
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.create_partitions.v3 import request as partitions_request
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.describe_configs.v4 import request as describe
from kio.schema.describe_transactions.v0 import request as describe_transactions
from kio.schema.end_txn.v3 import request as end_txn
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental
from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.join_group.v7 import request as join_group
from kio.schema.list_groups.v4 import request as list_groups
from kio.schema.list_transactions.v1 import request as list_transactions
from kio.schema.metadata.v12 import request as metadata
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate
from kio.schema.sasl_handshake.v1 import request as sasl_handshake
from passlib.apache import HtpasswdFile
from passlib.hash import bcrypt

from magnetar.broker.auth.authentication import AuthenticationError
from magnetar.kafka.protocol.messages import encode_request
from magnetar.kafka.sasl import UserNamespaces, parse_plain

TIMEOUT = datetime.timedelta(seconds=10)
GRANTS = {"app": ["produce", "consume"], "ingest": ["produce"], "reader": ["consume"]}


class Secured:
    def __init__(self, directory) -> None:
        self.key = secrets.token_bytes(32)
        htpasswd = HtpasswdFile(str(directory / "htpasswd"), new=True)
        htpasswd.set_hash("carol", bcrypt.using(rounds=4).hash("carol-pw"))  # checked on a worker thread
        htpasswd.save()
        self.broker, ports = start({
            "authenticationEnabled": True, "authenticationProviders": "token,basic", "authorizationEnabled": True,
            "basicAuthConf": str(directory / "htpasswd"),
            "superUserRoles": "admin", "tokenSecretKey": "data:;base64," + base64.b64encode(self.key).decode(),
            "kafkaListeners": "SASL_PLAINTEXT://127.0.0.1:0", "kafkaTenant": "kt",
            "kafkaNamespace": "ns", "transactionCoordinatorEnabled": True})
        self.port = ports["SASL_PLAINTEXT"]
        self.admin("PUT", "tenants/kt", {"adminRoles": ["kt-admin"], "allowedClusters": ["standalone"]})
        self.admin("PUT", "namespaces/kt/ns")
        self.admin("PUT", "namespaces/kt/other")
        for role, actions in GRANTS.items():
            self.admin("POST", f"namespaces/kt/ns/permissions/{role}", actions)

    def token(self, role: str, expires_in: float | None = None) -> str:
        claims: dict[str, object] = {"sub": role}
        if expires_in is not None:
            claims["exp"] = int(datetime.datetime.now().timestamp() + expires_in)
        return jwt.encode(claims, self.key, algorithm="HS256")

    def admin(self, method: str, path: str, body: object = None) -> object:
        return admin_call(self.broker.admin_url, self.token("admin"), method, path, body)

    def connect(self) -> RawKafka:
        return RawKafka(f"127.0.0.1:{self.port}")

    def login(self, role: str, user: str = "kt/ns", password: str | None = None) -> tuple[RawKafka, object]:
        raw = self.connect()
        handshake = raw.call(17, 1, sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN"))
        assert (handshake.error_code, handshake.mechanisms) == (ErrorCode.none, ("PLAIN",))
        message = b"\0" + user.encode() + b"\0" + (password or f"token:{self.token(role)}").encode()
        return raw, raw.call(36, 2, sasl_authenticate.SaslAuthenticateRequest(auth_bytes=message))


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[Secured]:
    started = Secured(tmp_path_factory.mktemp("sasl"))
    yield started
    started.broker.stop()


def _user(secured: Secured, role: str, user: str = "kt/ns") -> RawKafka:
    raw, answer = secured.login(role, user)
    assert answer.error_code == ErrorCode.none, answer
    assert answer.session_lifetime == datetime.timedelta(0) and answer.auth_bytes == b""
    return raw


# -- the user name
def test_user_names_choose_namespaces_as_kop_does() -> None:
    existing = {"kt/ns", "kt/default", "team/x"}
    multi = UserNamespaces("kt", "default", True, existing.__contains__)
    assert multi.default == "kt/default"
    assert [multi(user) for user in ("kt", "kt/ns", "team/x")] == ["kt/default", "kt/ns", "team/x"]
    for user, words in (("team", "names namespace team/default, which does not exist"),
                        ("kt/missing", "names namespace kt/missing, which does not exist"),
                        ("kt/ns/x", "is not a tenant or tenant/namespace"), ("kt/", "is not a tenant"),
                        ("/ns", "is not a tenant")):
        with pytest.raises(AuthenticationError, match=words):
            multi(user)
    single = UserNamespaces("kt", "ns", False, existing.__contains__)
    assert (single("kt/ns"), single("kt")) == ("kt/ns", "kt/ns")
    for user in ("kt/default", "team/x", "k"):
        with pytest.raises(AuthenticationError, match=r"names no namespace of this listener: Kafka topics live in "
                                                      r"kt/ns \(kafkaTenant/kafkaNamespace\)"):
            single(user)


def test_plain_messages_are_parsed_as_rfc_4616_with_kops_password() -> None:
    assert parse_plain(b"authz\0kt/ns\0token:abc:def") == ("kt/ns", "token", "abc:def")
    framing = "a SASL/PLAIN message is authzid NUL user NUL password"
    password = "the password must be <method>:<credentials>, as token:<jwt>"
    for message, words in ((b"kt/ns\0token:x", framing), (b"\0a\0b\0c", framing),
                           (b"\0\0token:x", "no user name: it names the tenant or tenant/namespace"),
                           (b"\0kt\0token", password), (b"\0kt\0:x", password), (b"\0kt\0token:", password),
                           (b"\0\xff\0token:x", "the SASL/PLAIN user name and password must be UTF-8")):
        with pytest.raises(AuthenticationError) as caught:
            parse_plain(message)
        assert str(caught.value) == words


# -- the exchange
@pytest.mark.parametrize(("user", "password", "words"), [
    ("kt/missing", None, "names namespace kt/missing, which does not exist"),
    ("kt/ns", "tls:x", "no authentication provider for method 'tls' (this broker has basic, token)"),
    ("kt/ns", "basic:carol:wrong", "unknown user 'carol' or wrong password"),
    ("kt/ns", "token:not-a-jwt", "invalid token: not a JWT"),
    ("kt/ns", "nothing", "the password must be <method>:<credentials>"),
])
def test_refused_credentials_close_the_connection_after_their_answer(secured, user, password, words,
                                                                     caplog) -> None:
    with caplog.at_level(logging.INFO, logger="magnetar.kafka.sasl"):
        raw, answer = secured.login("app", user, password)
    try:
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message.startswith("Authentication failed: ") and words in answer.error_message
        assert raw.receive_frame() is None
    finally:
        raw.close()
    (record,) = [r for r in caplog.records if r.name == "magnetar.kafka.sasl"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("Kafka client 127.0.0.1:")
    assert "SASL refused (sasl_authentication_failed): " in record.getMessage()
    assert record.getMessage().endswith("; closing its connection") and words in record.getMessage()


def test_a_provider_on_a_worker_thread_completes_the_exchange(secured, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="magnetar.kafka.sasl"):
        raw, answer = secured.login("carol", "kt/ns", "basic:carol:carol-pw")
    try:
        assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
        assert _topics(raw, ["x"]) == {"x": ErrorCode.topic_authorization_failed}  # carol has no grant
    finally:
        raw.close()
    (accepted,) = [r.getMessage() for r in caplog.records if "authenticated as" in r.getMessage()]
    assert accepted.startswith("Kafka client 127.0.0.1:")
    assert accepted.endswith(" authenticated as role 'carol' (basic) in namespace kt/ns")


def test_the_exchange_goes_in_kafkas_order(secured, caplog) -> None:
    raw = secured.connect()
    try:
        with caplog.at_level(logging.INFO, logger="magnetar.kafka.sasl"):
            wrong = raw.call(17, 1, sasl_handshake.SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        assert (wrong.error_code, wrong.mechanisms) == (ErrorCode.unsupported_sasl_mechanism, ("PLAIN",))
        assert raw.receive_frame() is None
    finally:
        raw.close()
    raw = secured.connect()
    try:
        early = raw.call(36, 2, sasl_authenticate.SaslAuthenticateRequest(auth_bytes=b"\0kt/ns\0token:x"))
        assert early.error_code == ErrorCode.illegal_sasl_state
        assert early.error_message == "Authentication failed: SaslAuthenticate while waiting for SaslHandshake"
    finally:
        raw.close()
    raw = _user(secured, "app")
    try:
        with caplog.at_level(logging.INFO, logger="magnetar.kafka.sasl"):
            again = raw.call(17, 1, sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN"))
            assert again.error_code == ErrorCode.illegal_sasl_state
            assert raw.receive_frame() is None
    finally:
        raw.close()
    refusals = [r.getMessage().split(": ", 1)[1] for r in caplog.records if "SASL refused" in r.getMessage()]
    assert refusals == ["SASL refused (unsupported_sasl_mechanism): mechanism 'SCRAM-SHA-256' (this broker has "
                        "PLAIN); closing its connection",
                        "SASL refused (illegal_sasl_state): SaslAuthenticate while waiting for SaslHandshake; closing "
                        "its connection",
                        "SASL refused (illegal_sasl_state): SaslHandshake while authenticated; closing its connection"]
    raw = secured.connect()
    try:
        raw.call(18, 3, api_versions.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        raw.call(17, 1, sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN"))  # both allowed before it
        raw.send_raw(encode_request(3, 12, 9, "raw", _metadata_request(None)))
        assert raw.receive_frame() is None  # anything else before the exchange completes closes
    finally:
        raw.close()


def test_an_expired_token_ends_the_connection_at_its_next_request(secured) -> None:
    raw, answer = secured.login("app", password=f"token:{secured.token('app', expires_in=1)}")
    try:
        assert answer.error_code == ErrorCode.none
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            raw.send_raw(encode_request(3, 12, 1, "raw", _metadata_request(None)))
            if raw.receive_frame() is None:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the connection outlived its token")
    finally:
        raw.close()


# -- what each role may do
def _metadata_request(names: list[str] | None, create: bool = True) -> object:
    return metadata.MetadataRequest(
        topics=None if names is None else tuple(metadata.MetadataRequestTopic(name=n, topic_id=None) for n in names),
        allow_auto_topic_creation=create, include_topic_authorized_operations=False)


def _topics(raw: RawKafka, names: list[str] | None, create: bool = True) -> dict[str, ErrorCode]:
    return {t.name: t.error_code for t in raw.call(3, 12, _metadata_request(names, create)).topics}


def test_each_request_is_authorized_as_the_connections_role(secured) -> None:
    topic = f"s-{uuid.uuid4().hex[:8]}"
    app, ingest, reader, nobody, other = (_user(secured, "app"), _user(secured, "ingest"), _user(secured, "reader"),
                                          _user(secured, "nobody"), _user(secured, "app", "kt/other"))
    try:
        assert _topics(app, [topic]) == {topic: ErrorCode.none}
        assert app.produce(topic, batch([b"x"])) == (ErrorCode.none, 0)
        assert ingest.produce(topic, batch([b"y"])) == (ErrorCode.none, 1)
        assert reader.produce(topic, batch([b"z"]))[0] == ErrorCode.topic_authorization_failed
        assert _topics(nobody, [topic]) == {topic: ErrorCode.topic_authorization_failed}
        assert topic in _topics(reader, None) and _topics(ingest, None) == {}  # listing needs consume
        assert _topics(other, [topic]) == {topic: ErrorCode.topic_authorization_failed}  # app has no grant there
        assert other.produce(topic, batch([b"w"]))[0] == ErrorCode.topic_authorization_failed
        groups = list_groups.ListGroupsRequest(states_filter=())
        assert reader.call(16, 4, groups).error_code == ErrorCode.none
        assert ingest.call(16, 4, groups).groups == ()
        for raw, allowed in ((app, False), (_user(secured, "kt-admin"), True)):
            assert _create(raw, f"{topic}-{allowed}") == (ErrorCode.none if allowed else
                                                          ErrorCode.topic_authorization_failed)
            assert _alter(raw, topic) == (ErrorCode.none if allowed else ErrorCode.topic_authorization_failed)
            assert _grow(raw, topic) == (ErrorCode.none if allowed else ErrorCode.topic_authorization_failed)
            assert _delete(raw, topic) == (ErrorCode.none if allowed else ErrorCode.topic_authorization_failed)
        assert _describe(reader, topic) == ErrorCode.none and _describe(nobody, topic) == \
            ErrorCode.topic_authorization_failed
    finally:
        for raw in (app, ingest, reader, nobody, other):
            raw.close()


def _alter(raw: RawKafka, topic: str) -> ErrorCode:
    resource = incremental.AlterConfigsResource(resource_type=2, resource_name=topic, configs=(
        incremental.AlterableConfig(name="retention.ms", config_operation=0, value="60000"),))
    (answer,) = raw.call(44, 1, incremental.IncrementalAlterConfigsRequest(resources=(resource,),
                                                                           validate_only=False)).responses
    return answer.error_code


def _grow(raw: RawKafka, topic: str) -> ErrorCode:
    request = partitions_request.CreatePartitionsRequest(topics=(partitions_request.CreatePartitionsTopic(
        name=topic, count=2, assignments=None),), timeout=TIMEOUT, validate_only=True)
    return raw.call(37, 3, request).results[0].error_code


def _delete(raw: RawKafka, topic: str) -> ErrorCode:
    request = delete_records.DeleteRecordsRequest(topics=(delete_records.DeleteRecordsTopic(name=topic, partitions=(
        delete_records.DeleteRecordsPartition(partition_index=0, offset=0),)),), timeout=TIMEOUT)
    (answer,) = raw.call(21, 2, request).topics[0].partitions
    assert answer.low_watermark == (0 if answer.error_code == ErrorCode.none else -1)
    return answer.error_code


def _create(raw: RawKafka, topic: str) -> ErrorCode:
    request = create_topics.CreateTopicsRequest(topics=(create_topics.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, assignments=(), configs=()),), timeout=TIMEOUT,
        validate_only=False)
    (answer,) = raw.call(19, 7, request).topics
    return answer.error_code


def _describe(raw: RawKafka, topic: str) -> ErrorCode:
    resource = describe.DescribeConfigsResource(resource_type=2, resource_name=topic, configuration_keys=("x",))
    return raw.call(32, 4, describe.DescribeConfigsRequest(resources=(resource,), include_synonyms=False,
                                                           include_documentation=False)).results[0].error_code


def test_a_topic_of_a_tenant_gone_is_unknown(secured) -> None:
    secured.admin("PUT", "tenants/gone", {"adminRoles": [], "allowedClusters": ["standalone"]})
    secured.admin("PUT", "namespaces/gone/ns")
    raw = _user(secured, "admin", "gone/ns")
    try:
        secured.admin("DELETE", "namespaces/gone/ns")
        secured.admin("DELETE", "tenants/gone")
        assert _topics(raw, ["t"]) == {"t": ErrorCode.unknown_topic_or_partition}
        assert raw.produce("t", batch([b"x"])) == (ErrorCode.unknown_topic_or_partition, -1)
    finally:
        raw.close()


def test_groups_need_consume_on_the_namespace(secured) -> None:
    reader, ingest = _user(secured, "reader"), _user(secured, "ingest")
    try:
        for raw, error in ((reader, ErrorCode.none), (ingest, ErrorCode.group_authorization_failed)):
            answer = raw.call(11, 7, join_group.JoinGroupRequest(
                group_id="g", session_timeout=datetime.timedelta(seconds=10),
                rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
                protocol_type="consumer", protocols=(join_group.JoinGroupRequestProtocol(name="range", metadata=b""),)))
            assert answer.error_code == error
    finally:
        reader.close()
        ingest.close()


def test_deleting_topics_needs_a_tenant_admin_and_says_why(secured) -> None:
    topic = f"d-{uuid.uuid4().hex[:8]}"
    app, admin = _user(secured, "app"), _user(secured, "kt-admin")
    try:
        assert _topics(app, [topic]) == {topic: ErrorCode.none}
        request = delete_topics.DeleteTopicsRequest(topics=(delete_topics.DeleteTopicState(name=topic, topic_id=None),),
                                                    timeout=TIMEOUT)
        (refused,) = app.call(20, 6, request).responses
        assert refused.error_code == ErrorCode.topic_authorization_failed and "app" in refused.error_message
        (deleted,) = admin.call(20, 6, request).responses
        assert (deleted.error_code, deleted.error_message) == (ErrorCode.none, None)
    finally:
        app.close()
        admin.close()


# -- transactional ids (Kafka's TRANSACTIONAL_ID resource): produce on the namespace, and the id the role's own
def _init_id(raw: RawKafka, transactional_id: str, producer: tuple[int, int] = (-1, -1)) -> tuple[ErrorCode, int, int]:
    answer = raw.call(22, 4, init_producer_id.InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=TIMEOUT, producer_id=producer[0],
        producer_epoch=producer[1]))
    return answer.error_code, answer.producer_id, answer.producer_epoch


def _add(raw: RawKafka, transactional_id: str, producer: tuple[int, int], topic: str) -> ErrorCode:
    answer = raw.call(24, 3, add_partitions.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer[0],
        v3_and_below_producer_epoch=producer[1],
        v3_and_below_topics=(add_partitions.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),)))
    return answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def _end(raw: RawKafka, transactional_id: str, producer: tuple[int, int], commit: bool) -> ErrorCode:
    return raw.call(26, 3, end_txn.EndTxnRequest(transactional_id=transactional_id, producer_id=producer[0],
                                                 producer_epoch=producer[1], committed=commit)).error_code


def _described(raw: RawKafka, *ids: str) -> list[tuple[ErrorCode, str]]:
    states = raw.call(65, 0, describe_transactions.DescribeTransactionsRequest(transactional_ids=ids))
    return [(state.error_code, state.transaction_state) for state in states.transaction_states]


def _listed(raw: RawKafka) -> set[str]:
    answer = raw.call(66, 1, list_transactions.ListTransactionsRequest(
        state_filters=(), producer_id_filters=(), duration_filter=-1))
    assert answer.error_code == ErrorCode.none
    return {state.transactional_id for state in answer.transaction_states}


def test_a_transactional_id_is_its_first_roles_and_needs_produce_on_the_namespace(secured) -> None:
    """An attacker with a grant of its own (ingest) or none to produce (reader, nobody) can
    neither take over, end, describe nor list app's id, even knowing its producer id and epoch;
    it cannot tell an id that exists from one that does not."""
    topic, owned = f"t-{uuid.uuid4().hex[:8]}", f"app-{uuid.uuid4().hex[:8]}"
    app, ingest, reader, nobody = (_user(secured, "app"), _user(secured, "ingest"), _user(secured, "reader"),
                                   _user(secured, "nobody"))
    denied = ErrorCode.transactional_id_authorization_failed
    try:
        assert _topics(app, [topic]) == {topic: ErrorCode.none}
        error, *producer = _init_id(app, owned)
        assert error == ErrorCode.none
        assert _add(app, owned, tuple(producer), topic) == ErrorCode.none
        for attacker in (ingest, reader, nobody):
            assert _init_id(attacker, owned)[0] == denied  # no fencing the owner by taking its id
            assert _init_id(attacker, owned, tuple(producer))[0] == denied
            assert _add(attacker, owned, tuple(producer), topic) == denied
            assert _end(attacker, owned, tuple(producer), commit=False) == denied
            unknown = ErrorCode.transactional_id_not_found if attacker is ingest else denied  # ingest may produce
            assert _described(attacker, owned, "never-used") == [(denied, ""), (unknown, "")]
            assert owned not in _listed(attacker)
        for role in (reader, nobody):  # no produce: no transactional id at all, not even a new one
            assert _init_id(role, f"own-{uuid.uuid4().hex[:8]}")[0] == denied
        assert _described(app, owned) == [(ErrorCode.none, "Ongoing")]  # the owner's transaction went on
        assert owned in _listed(app)
        assert _end(app, owned, tuple(producer), commit=True) == ErrorCode.none
        secured.admin("DELETE", "namespaces/kt/ns/permissions/app")  # revoked: the next request is refused
        try:
            assert _init_id(app, owned, tuple(producer))[0] == denied
            assert _add(app, owned, tuple(producer), topic) == denied
            assert _described(app, owned) == [(denied, "")] and _listed(app) == set()
        finally:
            secured.admin("POST", "namespaces/kt/ns/permissions/app", GRANTS["app"])
    finally:
        for raw in (app, ingest, reader, nobody):
            raw.close()
