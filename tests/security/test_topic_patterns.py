"""A client's topics pattern cannot freeze the broker (issue 28, 6).

`persistent://t1/ns/(a+)+b` against a topic named with 30 a's once ran Python's
backtracking engine on the event loop for minutes, and every tenant's requests waited.
Patterns now run on RE2 (linear time); what RE2 cannot express, and patterns longer than
subscriptionPatternMaxLength, are not evaluated by the broker at all: the whole list goes
back marked unfiltered and the client filters it, as with Pulsar."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pulsar
import pytest
from admin_http import http
from rawclient import RawClient
from security_helpers import AUTHZ_SETTINGS, admin_json, build_scene, client_as
from standalone import Standalone

from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
EVIL_TOPIC = "persistent://t1/ns/" + "a" * 30
OTHER_TOPIC = "persistent://t1/ns/other"


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("patterns") / "data", [*AUTHZ_SETTINGS, signer.setting]).start()
    build_scene(broker.admin_url, signer)
    for topic in (EVIL_TOPIC, OTHER_TOPIC):
        status, body = admin_json("PUT", f"{broker.admin_url}/admin/v2/{topic.replace('://', '/')}",
                                  signer.bearer("admin"))
        assert status == 204, body
    yield broker
    broker.stop()


def list_topics(raw: RawClient, pattern: str, request_id: int) -> pb.CommandGetTopicsOfNamespaceResponse:
    raw.command(T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
        namespace="t1/ns", request_id=request_id, topics_pattern=pattern)))
    return raw.expect(T.GET_TOPICS_OF_NAMESPACE_RESPONSE, timeout=60).getTopicsOfNamespaceResponse


@pytest.fixture
def raw(broker, signer) -> Iterator[RawClient]:
    raw = RawClient(broker.url)
    raw.connect("token", signer.token("reader").encode())
    yield raw
    raw.close()


def test_a_catastrophic_pattern_does_not_hold_up_anyone_else(broker, signer, raw):
    raw.command(T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
        namespace="t1/ns", request_id=1, topics_pattern="persistent://t1/ns/(a+)+b")))
    # another tenant's health check, sent while the pattern is being matched; a backtracking
    # engine needed minutes for it, so a generous deadline tells the two apart
    status, _, _ = http("GET", f"{broker.admin_url}/admin/v2/brokers/health", headers=signer.bearer("admin"))
    assert status == 200
    answer = raw.expect(T.GET_TOPICS_OF_NAMESPACE_RESPONSE).getTopicsOfNamespaceResponse
    assert answer.filtered and list(answer.topics) == []  # evaluated, and nothing matches


def test_patterns_re2_evaluates_select_on_the_broker(raw):
    answer = list_topics(raw, "persistent://t1/ns/a{30}", 2)
    assert answer.filtered and list(answer.topics) == [EVIL_TOPIC]


@pytest.mark.parametrize("pattern", [
    "persistent://t1/ns/" + "a" * 30 + ".*",  # 51 characters: longer than subscriptionPatternMaxLength
    r"persistent://t1/ns/(a)\1*",  # a back-reference: RE2 cannot, Pulsar would backtrack
    "persistent://t1/ns/(?=a)a*",  # look-ahead: likewise
], ids=["too-long", "back-reference", "look-ahead"])
def test_patterns_the_broker_does_not_evaluate_leave_the_filtering_to_the_client(broker, raw, pattern):
    answer = list_topics(raw, pattern, 3)
    assert not answer.filtered
    assert sorted(answer.topics) == sorted([EVIL_TOPIC, OTHER_TOPIC])


def test_the_official_client_still_subscribes_by_a_long_pattern(broker, signer):
    """The list comes back unfiltered; the client keeps only the topics its pattern matches."""
    client = client_as(broker.url, signer, "app")
    try:
        pattern = re.compile("persistent://t1/ns/" + "a" * 30 + ".*")
        consumer = client.subscribe(pattern, "long-pattern", initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer(OTHER_TOPIC).send(b"not matched")
        client.create_producer(EVIL_TOPIC).send(b"matched")
        assert consumer.receive(10_000).data() == b"matched"
        with pytest.raises(pulsar.Timeout):
            consumer.receive(1000)
    finally:
        client.close()
    assert "longer than subscriptionPatternMaxLength (50), not evaluated" in broker.log()
