"""EFFECTIVELY_ONCE on transactions with authorization on (issue 46): an instance's
transactions belong to the role that deployed the function, and a role's transaction is no
way into a topic of another tenant: registering a foreign partition or subscription with it
is refused, as a client of that role, acting as an attacker would, finds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fn_scene import Scene, start_scene
from polling import wait_for

import magnetar.client
from magnetar.admin_client.transactions import TransactionsAdmin
from magnetar.client import errors
from magnetar.wire import txn as wire_txn


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    scene = start_scene(tmp_path_factory.mktemp("fn-txn-auth"), "transactionCoordinatorEnabled=true")
    yield scene
    scene.broker.stop()


def owned_by(scene: Scene, role: str, topic: str) -> dict[str, Any] | None:
    """An open transaction of `role` that produced to `topic`, as the admin API shows it."""
    for meta in TransactionsAdmin(scene.admin).slow_transactions(0).values():
        if meta["owner"] == role and topic in meta["producedPartitions"]:
            return meta
    return None


def test_an_instances_transactions_belong_to_its_deploying_role(scene: Scene) -> None:
    side = "persistent://t1/ns/txh-side"
    scene.deploy("fnapp", "txh", "txn_holding.py", "txn_holding.TxnHolding", inputs=["t1/ns/txh-in"],
                 output="t1/ns/txh-out", processingGuarantees="EFFECTIVELY_ONCE",
                 userConfig={"side": side, "hold_s": 2})
    client = scene.client("app")
    try:
        client.create_producer("t1/ns/txh-in").send(b"x")
    finally:
        client.close()
    assert wait_for(lambda: owned_by(scene, "fnapp", side), timeout=30)


def register(client: magnetar.client.Client, txn: Any, build: Any) -> None:
    """One registration request with the transaction's coordinator, as any client may send it."""
    core = txn._core
    client._run(core._coordinators.request(core.txn_id.most, build))


@pytest.mark.parametrize("kind", ["partition", "subscription"])
def test_a_transaction_cannot_take_in_a_topic_its_role_may_not_use(scene: Scene, kind: str) -> None:
    """fnapp may produce and consume in t1/ns only: its transaction takes its own topics, and
    refuses t2's (whose end would write a marker there, or move a subscription of it)."""
    client = magnetar.client.Client(scene.broker.url, authentication=magnetar.client.AuthenticationToken(
        scene.token("fnapp")), operation_timeout_seconds=10, enable_transaction=True)
    try:
        txn = client.new_transaction(30)
        txn_id = wire_txn.TxnId(*txn.txn_id)

        def build(topic: str) -> Any:
            if kind == "partition":
                return lambda request_id: wire_txn.add_partition_to_txn(request_id, txn_id, [topic])
            return lambda request_id: wire_txn.add_subscription_to_txn(request_id, txn_id, topic, "sub")

        register(client, txn, build("persistent://t1/ns/own"))
        for foreign in ("persistent://t2/ns/foreign", "persistent://t1/ns2/foreign"):
            with pytest.raises(errors.AuthorizationError):
                register(client, txn, build(foreign))
        txn.abort()
    finally:
        client.close()
