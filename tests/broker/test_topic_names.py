"""Pulsar's naming rules, and our length limits, for names clients and admins send."""

from __future__ import annotations

import json
import urllib.parse

import pytest
from admin_http import http
from rawclient import RawClient

from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import InvalidTopicNameError, TopicName

T = pb.BaseCommand

BAD_NAMES = {
    "dot-dot-path": "persistent://public/default/../../etc",
    "dot-dot-tenant": "persistent://../default/t",
    "dot-namespace": "persistent://public/./t",
    "nul": "persistent://public/default/a\x00b",
    "newline": "persistent://public/default/a\nb",
    "slash-in-local-name": "persistent://public/default/a/b",
    "space-in-tenant": "persistent://pub lic/default/t",
    "10KB": "persistent://public/default/" + "x" * 10_000,
    "1MB": "persistent://public/default/" + "y" * 1_000_000,
    "long-tenant": "persistent://" + "t" * 300 + "/default/t",
    # invisible or direction-changing: one name would look like another in listings
    "right-to-left-override": "persistent://public/default/invoice-\u202egpj.exe",
    "zero-width-space": "persistent://public/default/pay\u200bments",
    "byte-order-mark": "persistent://public/default/\ufefforders",
    "no-break-space": "persistent://public/default/a\u00a0b",
    "line-separator": "persistent://public/default/a\u2028b",
}


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_parse_refuses(name):
    with pytest.raises(InvalidTopicNameError) as refused:
        TopicName.parse(name)
    assert len(str(refused.value)) < 300  # a huge name is not echoed whole


@pytest.mark.parametrize("name", ["t", "public/default/t", "persistent://my-tenant/ns_1/topic.with:=chars-partition-3",
                                  "non-persistent://a/b/ünïcode topic", "persistent://public/default/" + "z" * 512,
                                  "persistent://public/default/заказы", "persistent://public/default/注文-1",
                                  "persistent://public/default/caf\u0065\u0301"])  # visible, as Pulsar: NFD too
def test_parse_accepts(name):
    TopicName.parse(name)


def test_broker_refuses_bad_names_and_stores_nothing(broker):
    raw = RawClient(broker.url)
    raw.connect()
    for request_id, name in enumerate(BAD_NAMES.values(), start=1):
        raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=name, producer_id=request_id,
                                                                   request_id=request_id)))
        refused = raw.expect(T.ERROR).error
        assert (refused.request_id, refused.error) == (request_id, pb.InvalidTopicName)
        raw.command(T(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic=name, request_id=1000 + request_id)))
        answer = raw.expect(T.LOOKUP_RESPONSE).lookupTopicResponse
        assert answer.error == pb.InvalidTopicName
    raw.ping()
    raw.close()
    stored = list((broker.data_dir / "managed-ledgers").iterdir())
    assert stored == [], stored


@pytest.mark.parametrize("local", ["..", "a%00b", "a%0Ab", "x" * 1000, "a%E2%80%AEb", "a%E2%80%8Bb"])
def test_admin_answers_412(broker, local):
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/{urllib.parse.quote(local, safe='%')}"
    status, _, body = http("PUT", url)
    assert status == 412, (status, body[:200])
    assert "reason" in json.loads(body)
