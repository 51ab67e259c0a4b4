"""What a hostile or careless admin sends gets a clear 4xx, never a server error (issue 28, 7
and the probe beyond it).

`skip/{n}` and `position/{n}` with 2^64 once answered 500 from a traceback. Pulsar reads
these as longs; magnetar now refuses, in one place each for paths, queries and JSON bodies,
anything beyond a signed 64-bit integer with 412 naming it, and what is no integer at all
with 400. A namespace created with policies in its body once stored them unchecked: a
tenant admin's `"auth_policies": "garbage"` made every later request on the namespace fail
with 500; each field magnetar reads is now checked as its own route checks it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from admin_http import http
from security_helpers import AUTHZ_SETTINGS, build_scene, client_as
from standalone import Standalone

BASE = "/admin/v2/persistent/t1/ns/numbers"
SUBSCRIPTION = BASE + "/subscription/sub"
TOO_BIG = [str(2**63), str(2**64), "-" + str(2**63 + 1), "9" * 400]


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("numbers") / "data", [*AUTHZ_SETTINGS, signer.setting]).start()
    build_scene(broker.admin_url, signer)
    client = client_as(broker.url, signer, "app")
    try:
        client.subscribe("persistent://t1/ns/numbers", "sub").close()
        client.create_producer("persistent://t1/ns/numbers").send(b"x")
    finally:
        client.close()
    yield broker
    assert "Traceback" not in broker.log()
    broker.stop()


def call(broker: Standalone, signer, role: str, method: str, path: str, body: str | None = None) -> tuple[int, str]:
    status, _, content = http(method, broker.admin_url + path, None if body is None else body.encode(),
                              headers=signer.bearer(role))
    return status, json.loads(content).get("reason", "") if content.startswith(b"{") else ""


@pytest.mark.parametrize("number", TOO_BIG, ids=["2^63", "2^64", "-2^63-1", "400-digits"])
def test_numbers_beyond_a_long_answer_412(broker, signer, number):
    as_reader = [("POST", f"{SUBSCRIPTION}/skip/{number}"), ("GET", f"{SUBSCRIPTION}/position/{number}"),
                 ("POST", f"{SUBSCRIPTION}/resetcursor/{number}"), ("POST", f"{SUBSCRIPTION}/expireMessages/{number}"),
                 ("GET", f"{BASE}/ledger/{number}/entry/0"), ("GET", f"{BASE}/ledger/0/entry/{number}"),
                 ("GET", f"{BASE}/examinemessage?messagePosition={number}")]
    for method, path in as_reader:
        status, reason = call(broker, signer, "reader", method, path)
        assert status == 412 and "out of range" in reason, (method, path, status, reason)
    as_admin = [(f"{BASE}/messageTTL?messageTTL={number}", None), (f"{BASE}/maxProducers", number),
                (f"{BASE}/retention", f'{{"retentionTimeInMinutes": {number}, "retentionSizeInMB": 1}}'),
                (f"{BASE}/backlogQuota", f'{{"limitSize": {number}, "limitTime": 1}}'),
                (f"{SUBSCRIPTION}/resetcursor", f'{{"ledgerId": {number}, "entryId": 0}}'),
                ("/admin/v2/namespaces/t1/ns/delayedDelivery", f'{{"active": true, "tickTime": {number}}}')]
    for path, body in as_admin:
        status, reason = call(broker, signer, "t1-admin", "POST", path, body)
        assert status == 412 and "out of range" in reason, (path, status, reason)


@pytest.mark.parametrize("text", ["1e3", " 12", "1_000", "\u0661\u0662", "12abc"])
def test_what_is_no_integer_answers_400(broker, signer, text):
    status, reason = call(broker, signer, "reader", "POST", f"{SUBSCRIPTION}/skip/{quote(text)}")
    assert status == 400 and "must be an integer" in reason, (status, reason)


def test_non_finite_json_numbers_answer_412(broker, signer):
    for body in ('{"retentionTimeInMinutes": 1e400, "retentionSizeInMB": 1}',
                 '{"retentionTimeInMinutes": NaN, "retentionSizeInMB": 1}'):
        status, reason = call(broker, signer, "t1-admin", "POST", f"{BASE}/retention", body)
        assert status == 412, (body, status, reason)


@pytest.mark.parametrize("policies", [
    {"auth_policies": "garbage"},
    {"auth_policies": {"namespace_auth": {"app": ["produce", "teleport"]}}},
    {"message_ttl_in_seconds": "a day"},
    {"retention_policies": 5},
    {"backlog_quota_map": [1]},
    {"entryFilters": {"entryFilterNames": "os:abort"}},
], ids=["auth-garbage", "auth-unknown-action", "ttl-text", "retention-number", "quota-list", "filter-module"])
def test_a_namespace_is_not_created_with_policies_it_could_not_use(broker, signer, policies):
    status, reason = call(broker, signer, "t1-admin", "PUT", "/admin/v2/namespaces/t1/created-badly",
                          json.dumps(policies))
    assert status == 412, (status, reason)
    assert call(broker, signer, "admin", "GET", "/admin/v2/namespaces/t1/created-badly")[0] == 404


def test_a_namespace_created_with_good_policies_keeps_them(broker, signer):
    policies = {"auth_policies": {"namespace_auth": {"app": ["produce"]}}, "message_ttl_in_seconds": 60,
                "bundles": {"numBundles": 4}}  # Pulsar's own field, kept as given
    assert call(broker, signer, "t1-admin", "PUT", "/admin/v2/namespaces/t1/created-well", json.dumps(policies))[0] \
        == 204
    client = client_as(broker.url, signer, "app")
    try:
        client.create_producer("persistent://t1/created-well/t").send(b"granted at creation")
    finally:
        client.close()
