"""Pulsar Functions on a real standalone, deployed as Pulsar users deploy them (pulsar-admin's
verbs, the REST API's multipart upload) and driven with the official client. One broker for
the module: each test deploys functions of its own names and topics."""

from __future__ import annotations

import json
import pickle
import random
import string
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from fn_helpers import (
    CODE,
    EXAMPLES,
    as_json,
    deploy,
    functions_admin,
    magnetar_admin,
    make_client,
    receive_all,
    status,
    wait_consumers,
)
from polling import wait_for
from standalone import Standalone

from magnetar.admin_client import AdminError


@pytest.fixture(scope="module")
def fn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("functions") / "data").start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def client(fn_broker: Standalone) -> Iterator[pulsar.Client]:
    client = make_client(fn_broker.url)
    yield client
    client.close()


def words(rng: random.Random, count: int) -> list[str]:
    """Random words; prefixed, since IdentitySerDe reads "j" as complex and "nan" as float, as the SDK does."""
    return ["w-" + "".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 12))) for _ in range(count)]


def send_all(client: pulsar.Client, topic: str, values: list[str], rng: random.Random) -> None:
    """With the client's defaults (batching on), several keys a batch, in a few flushes."""
    producer = client.create_producer(topic)
    for value in values:
        producer.send_async(value.encode(), None, partition_key=f"k{rng.randint(0, 20)}")
        if rng.random() < 0.1:
            producer.flush()
    producer.flush()
    producer.close()


def test_exclamation_through_pulsar_admin_verbs(fn_broker: Standalone, client: pulsar.Client, tmp_path: Path) -> None:
    rng = random.Random()
    url = fn_broker.admin_url
    created = magnetar_admin(url, "functions", "create", "--name", "excl", "--py", str(CODE / "exclamation.py"),
                             "--classname", "exclamation.ExclamationFunction", "--inputs", "excl-in",
                             "--output", "excl-out")
    assert created.returncode == 0, created.stderr
    admin = functions_admin(url)
    config = as_json(magnetar_admin(url, "functions", "get", "--name", "excl", "--json"))
    assert config["inputs"] == ["excl-in"] and config["processingGuarantees"] == "ATLEAST_ONCE"
    assert config["parallelism"] == 1 and config["autoAck"] is True
    assert as_json(magnetar_admin(url, "functions", "list", "--json")) == ["excl"]
    wait_consumers(admin.admin, {**config, "inputs": ["persistent://public/default/excl-in"]}, 1)

    consumer = client.subscribe("excl-out", "check")
    values = words(rng, rng.randint(50, 150))
    send_all(client, "excl-in", values, rng)
    got = receive_all(consumer, len(values))
    assert sorted(m.data().decode() for m in got) == sorted(f"{v}!" for v in values)
    assert all(m.properties()["__pfn_input_topic__"] == "persistent://public/default/excl-in" for m in got)

    assert wait_for(lambda: status(admin, "excl")["instances"][0]["status"]["numSuccessfullyProcessed"]
                    == len(values))
    shown = as_json(magnetar_admin(url, "functions", "status", "--name", "excl", "--json"))
    assert shown["numInstances"] == 1 and shown["numRunning"] == 1
    assert shown["instances"][0]["status"]["numReceived"] == len(values)
    stats = as_json(magnetar_admin(url, "functions", "stats", "--fqfn", "public/default/excl", "--json"))
    assert stats["receivedTotal"] == len(values) and stats["userExceptionsTotal"] == 0
    metrics = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    assert f'pulsar_function_received_total{{cluster="standalone",tenant="public",namespace="public/default",' \
           f'name="excl",instance_id="0",fqfn="public/default/excl"}} {len(values)}' in metrics

    triggered = magnetar_admin(url, "functions", "trigger", "--name", "excl", "--trigger-value", "hello")
    assert triggered.stdout.strip() == "hello!", triggered.stderr
    downloaded = magnetar_admin(url, "functions", "download", "--name", "excl", "--destination-file",
                                str(tmp_path / "got.py"))
    assert downloaded.returncode == 0, downloaded.stderr
    assert (tmp_path / "got.py").read_bytes() == (CODE / "exclamation.py").read_bytes()

    assert magnetar_admin(url, "functions", "stop", "--name", "excl").returncode == 0
    assert status(admin, "excl")["numRunning"] == 0
    assert magnetar_admin(url, "functions", "start", "--name", "excl").returncode == 0
    wait_consumers(admin.admin, {**config, "inputs": ["persistent://public/default/excl-in"]}, 1)
    assert status(admin, "excl")["numRunning"] == 1
    assert magnetar_admin(url, "functions", "delete", "--name", "excl").returncode == 0
    assert admin.list("public", "default") == []
    with pytest.raises(AdminError) as refused:
        admin.status("public", "default", "excl")
    assert refused.value.status == 404
    assert admin.admin.subscriptions("excl-in") == [], "cleanupSubscription, on by default, as in Pulsar"
    assert not (fn_broker.data_dir / "functions" / "public" / "default" / "excl").exists(), "nor its files"


@pytest.mark.parametrize("guarantee", ["ATLEAST_ONCE", "EFFECTIVELY_ONCE"])
def test_context_api(fn_broker: Standalone, client: pulsar.Client, guarantee: str) -> None:
    """The same Context on the official client and, EFFECTIVELY_ONCE on transactions (the
    standalone's default), on magnetar.client."""
    name = "probe" if guarantee == "ATLEAST_ONCE" else "probe-eo"
    admin = functions_admin(fn_broker.admin_url)
    deploy(admin, name, "probe.py", "probe.Probe", inputs=[f"{name}-in"], output=f"{name}-out",
           logTopic=f"{name}-log", processingGuarantees=guarantee,
           userConfig={"greeting": "hi", "side_topic": f"{name}-side"}, secrets={"password": "s3cret"})
    out, side = client.subscribe(f"{name}-out", "check"), client.subscribe(f"{name}-side", "check")
    log = client.subscribe(f"{name}-log", "check", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(f"{name}-in")
    sent = producer.send(b"ping", partition_key="the-key", properties={"a": "1"}, event_timestamp=1234567)

    seen = json.loads(receive_all(out, 1)[0].data())
    assert seen["input"] == "ping" and seen["key"] == "the-key" and seen["partition_key"] == "the-key"
    assert seen["properties"] == {"a": "1"} and seen["eventtime"] == 1234567
    assert seen["topic"] == f"persistent://public/default/{name}-in" and seen["message_id"] == str(sent)
    assert (seen["tenant"], seen["namespace"], seen["name"], seen["instance"]) == ("public", "default", name, 0)
    assert seen["function_id"] and seen["version"] == "0"
    assert seen["user_config"] == {"greeting": "hi", "side_topic": f"{name}-side"} and seen["greeting"] == "hi"
    assert seen["secret"] == "s3cret" and seen["missing_secret"] is None
    assert seen["inputs"] == [f"{name}-in"] and seen["output"] == f"{name}-out" and seen["state"] == "ping"

    side_message, conf_message = receive_all(side, 2)
    assert side_message.data() == b"side:ping" and side_message.partition_key() == "side-key"
    assert side_message.properties() == {"from": "probe"}
    assert conf_message.data() == b"conf:ping" and conf_message.properties() == {"via": "conf"}
    assert conf_message.event_timestamp() == 42
    logged = [m.data().decode() for m in receive_all(log, 2)]
    assert "probe saw ping" in logged[0] and logged[1] == "probe printed ping", logged
    assert wait_for(lambda: "[0] probe printed ping" in fn_broker.log()), "and to the broker's log"
    assert admin.query_state("public", "default", name, "last")["stringValue"] == "ping"
    assert wait_for(lambda: admin.stats("public", "default", name)["instances"][0]["metrics"]["userMetrics"]
                    == {"seen": 2.0})
    metrics = urllib.request.urlopen(f"{fn_broker.admin_url}/metrics", timeout=10).read().decode()
    assert 'pulsar_function_user_metric_seen_sum{cluster="standalone",tenant="public",namespace="public/default",' \
           f'name="{name}",instance_id="0",fqfn="public/default/{name}"}} 2' in metrics
    admin.delete("public", "default", name)


def test_plain_functions_and_serdes(fn_broker: Standalone, client: pulsar.Client) -> None:
    admin = functions_admin(fn_broker.admin_url)
    deploy(admin, "plain", "plain.py", "plain", inputs=["plain-in"], output="plain-out")
    deploy(admin, "shout", "plain.py", "plain.shout", inputs=["plain-in"], output="shout-out",
           outputSerdeClassName="plain.UpperSerDe")
    deploy(admin, "pickled", "misbehaving.py", "misbehaving.Pickled", inputs=["pickle-in"], output="pickle-out",
           customSerdeInputs={"pickle-in": "serde.PickleSerDe"}, outputSerdeClassName="serde.PickleSerDe")
    plain_out, shout_out = client.subscribe("plain-out", "check"), client.subscribe("shout-out", "check")
    pickle_out = client.subscribe("pickle-out", "check")
    client.create_producer("plain-in").send(b"42")
    client.create_producer("pickle-in").send(pickle.dumps({"items": [1, 2, 3]}))
    assert receive_all(plain_out, 1)[0].data() == b"plain:42"  # IdentitySerDe: "42" -> 42 -> "plain:42"
    assert receive_all(shout_out, 1)[0].data() == b"SHOUT:42"
    assert pickle.loads(receive_all(pickle_out, 1)[0].data()) == {"got": {"items": [1, 2, 3]}, "n": 3}
    for name in ("plain", "shout", "pickled"):
        admin.delete("public", "default", name)


def test_raising_function_dead_letters(fn_broker: Standalone, client: pulsar.Client) -> None:
    admin = functions_admin(fn_broker.admin_url)
    deploy(admin, "raising", "raising.py", "raising.Raising", inputs=["raise-in"], output="raise-out",
           maxMessageRetries=1, deadLetterTopic="raise-dlq")
    out, dlq = client.subscribe("raise-out", "check"), client.subscribe("raise-dlq", "check")
    rng = random.Random()
    values = [f"{'bad' if rng.random() < 0.3 else 'ok'}-{i}" for i in range(20)] + ["bad-last", "ok-last"]
    send_all(client, "raise-in", values, rng)
    good = [v for v in values if "bad" not in v]
    bad = [v for v in values if "bad" in v]
    assert sorted(m.data().decode() for m in receive_all(out, len(good))) == sorted(good)
    assert sorted(m.data().decode() for m in receive_all(dlq, len(bad), timeout_ms=30000)) == sorted(bad)
    shown = status(admin, "raising")["instances"][0]["status"]
    assert shown["numUserExceptions"] >= 2 * len(bad)
    assert any("ValueError: cannot take bad" in e["exceptionString"] for e in shown["latestUserExceptions"])
    admin.delete("public", "default", "raising")


def test_parallelism_three_on_a_shared_input(fn_broker: Standalone, client: pulsar.Client) -> None:
    admin = functions_admin(fn_broker.admin_url)
    deploy(admin, "par", "exclamation.py", "exclamation.ExclamationFunction", inputs=["par-in"], output="par-out",
           parallelism=3)
    out = client.subscribe("par-out", "check")
    rng = random.Random()
    values = words(rng, 300)
    send_all(client, "par-in", values, rng)
    assert sorted(m.data().decode() for m in receive_all(out, len(values))) == sorted(f"{v}!" for v in values)
    assert wait_for(lambda: sum(i["status"]["numSuccessfullyProcessed"]
                                for i in status(admin, "par")["instances"]) == len(values))
    shown = status(admin, "par")
    assert shown["numInstances"] == 3 and shown["numRunning"] == 3
    assert sum(i["status"]["numReceived"] > 0 for i in shown["instances"]) >= 2, shown
    admin.delete("public", "default", "par")


def test_bad_code_and_config_are_refused_at_create(fn_broker: Standalone, tmp_path: Path) -> None:
    admin = functions_admin(fn_broker.admin_url)
    base = {"tenant": "public", "namespace": "default", "inputs": ["bad-in"]}

    def refusal(code: Path, **config: object) -> str:
        with pytest.raises(AdminError) as refused:
            admin.create({**base, "name": "bad", **config}, code)
        assert refused.value.status == 400
        return refused.value.reason

    assert "no_such_module_anywhere" in refusal(CODE / "broken.py", className="broken.process")
    nothing = "names no class or function defined in the uploaded code"
    assert f"exclamation.Nope {nothing} (its modules: exclamation)" in refusal(CODE / "exclamation.py",
                                                                            className="exclamation.Nope")
    assert f"missing.Function {nothing}" in refusal(CODE / "exclamation.py", className="missing.Function")
    empty_zip = tmp_path / "fn.zip"
    with zipfile.ZipFile(empty_zip, "w") as archive:
        archive.writestr("fn/src/other.py", "x = 1\n")
    assert refusal(empty_zip, className="exclamation.ExclamationFunction").endswith(f"{nothing} (its modules: "
                                                                                    "fn.src.other, other, src.other)")
    assert "processingGuarantees" in refusal(CODE / "exclamation.py", className="exclamation.ExclamationFunction",
                                            processingGuarantees="SOMETIMES")
    assert "Namespace nope/ns does not exist" in refusal(CODE / "exclamation.py", className="exclamation.Nope",
                                                         tenant="nope", namespace="ns")
    assert admin.list("public", "default") == []

    cli = magnetar_admin(fn_broker.admin_url, "functions", "create", "--name", "bad", "--py",
                         str(CODE / "exclamation.py"), "--classname", "exclamation.ExclamationFunction",
                         "--inputs", "bad-in", "--user-config", "{not json")
    assert cli.returncode == 2 and "--user-config is not valid JSON" in cli.stderr


def test_a_hanging_and_an_exiting_function_show_in_status(fn_broker: Standalone, client: pulsar.Client) -> None:
    admin = functions_admin(fn_broker.admin_url)
    deploy(admin, "hang", "misbehaving.py", "misbehaving.Hang", inputs=["hang-in"], output="hang-out", timeoutMs=500)
    deploy(admin, "exits", "misbehaving.py", "misbehaving.Exits", inputs=["exit-in"])
    out = client.subscribe("hang-out", "check")
    client.create_producer("hang-in").send(b"fine")
    assert receive_all(out, 1)[0].data() == b"fine"
    client.create_producer("hang-in").send(b"hang")
    client.create_producer("exit-in").send(b"exit")

    def failed(name: str, text: str) -> bool:
        instance = status(admin, name)["instances"][0]["status"]
        return instance["numRestarts"] >= 1 and any(text in e["exceptionString"]
                                                    for e in instance["latestUserExceptions"])

    assert wait_for(lambda: failed("hang", "did not return within timeoutMs=500"), timeout=30), status(admin, "hang")
    assert wait_for(lambda: failed("exits", "SystemExit: 7"), timeout=30), status(admin, "exits")
    started = time.monotonic()
    admin.delete("public", "default", "hang")
    admin.delete("public", "default", "exits")
    assert admin.list("public", "default") == [], time.monotonic() - started


def test_delayed_dispatch_example(fn_broker: Standalone, client: pulsar.Client) -> None:
    admin = functions_admin(fn_broker.admin_url)
    deploy(admin, "delayed-dispatch", EXAMPLES / "delayed_dispatch.py", "delayed_dispatch.DelayedDispatch",
           inputs=["dd-in"], output="dd-out", autoAck=False,
           customSerdeInputs={"dd-in": "delayed_dispatch.BytesSerDe"})
    out = client.subscribe("dd-out", "check", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer("dd-in")
    delay_ms = random.randint(1200, 2000)
    sent_at = time.time()
    producer.send(b"007", partition_key="order-7", properties={"delay_ms": str(delay_ms), "kind": "late"})
    producer.send(b"now", properties={"kind": "now"})
    first, second = receive_all(out, 2)
    assert first.data() == b"now" and first.properties() == {"kind": "now"}
    assert second.data() == b"007" and second.partition_key() == "order-7" and second.properties() == {"kind": "late"}
    assert time.time() >= sent_at + delay_ms / 1000, "delivered no earlier than its delay"
    assert wait_for(lambda: admin.admin.stats("dd-in")["subscriptions"]["public/default/delayed-dispatch"]
                    ["msgBacklog"] == 0), "the input is acknowledged once the output is stored"
    admin.delete("public", "default", "delayed-dispatch")


def test_update_restart_and_state_verbs(fn_broker: Standalone, client: pulsar.Client) -> None:
    url = fn_broker.admin_url
    admin = functions_admin(url)
    config = deploy(admin, "upd", "plain.py", "plain", inputs=["upd-in"], output="upd-out")
    out = client.subscribe("upd-out", "check")
    producer = client.create_producer("upd-in")
    producer.send(b"a")
    assert receive_all(out, 1)[0].data() == b"plain:a"

    updated = magnetar_admin(url, "functions", "update", "--name", "upd", "--classname", "plain.shout",
                             "--parallelism", "2")
    assert updated.returncode == 0, updated.stderr
    shown = admin.get("public", "default", "upd")
    assert shown["className"] == "plain.shout" and shown["parallelism"] == 2 and shown["inputs"] == ["upd-in"]
    wait_consumers(admin.admin, config, 2)
    producer.send(b"b")
    assert receive_all(out, 1)[0].data() == b"shout:b"
    with pytest.raises(AdminError, match=r"className gone\.F names no class or function defined in the uploaded code"):
        admin.update({**config, "className": "gone.F"})
    assert admin.get("public", "default", "upd")["className"] == "plain.shout", "a refused update changes nothing"

    before = status(admin, "upd")["instances"][1]["status"]["numRestarts"]
    assert magnetar_admin(url, "functions", "restart", "--name", "upd", "--instance-id", "1").returncode == 0
    wait_consumers(admin.admin, config, 2)
    assert status(admin, "upd")["instances"][1]["status"]["numRestarts"] == before
    single = as_json(magnetar_admin(url, "functions", "status", "--name", "upd", "--instance-id", "0", "--json"))
    assert single["running"] is True and single["numReceived"] >= 0

    put = magnetar_admin(url, "functions", "putstate", "--name", "upd", "--state",
                         '{"key": "greeting", "stringValue": "hello"}')
    assert put.returncode == 0, put.stderr
    assert as_json(magnetar_admin(url, "functions", "querystate", "--name", "upd", "--key", "greeting",
                                  "--json"))["stringValue"] == "hello"
    missing = magnetar_admin(url, "functions", "querystate", "--name", "upd", "--key", "nothing")
    assert missing.returncode == 1 and "key 'nothing' doesn't exist" in missing.stderr

    new_code = magnetar_admin(url, "functions", "update", "--name", "upd", "--py", str(CODE / "exclamation.py"),
                              "--classname", "exclamation.ExclamationFunction")
    assert new_code.returncode == 0, new_code.stderr
    assert admin.get("public", "default", "upd")["py"] == "exclamation.py"
    wait_consumers(admin.admin, config, 2)
    producer.send(b"c")
    assert receive_all(out, 1)[0].data() == b"c!"
    admin.delete("public", "default", "upd")


def test_at_most_once_and_a_topics_pattern(fn_broker: Standalone, client: pulsar.Client) -> None:
    """ATMOST_ONCE acknowledges on receipt: a message the function raised on never comes back.
    A topics pattern takes the topics it matches, those created later included."""
    admin = functions_admin(fn_broker.admin_url)
    client.create_producer("amo-a").close()
    deploy(admin, "amo", "raising.py", "raising.Raising", inputs=[], topicsPattern="persistent://public/default/amo-.*",
           output="result-of-amo", processingGuarantees="ATMOST_ONCE", subscriptionPosition="Earliest")
    out = client.subscribe("result-of-amo", "check")
    values = ["ok-1", "bad-1", "ok-2"]
    producer = client.create_producer("amo-a")
    for value in values:
        producer.send(value.encode())
    assert sorted(m.data().decode() for m in receive_all(out, 2)) == ["ok-1", "ok-2"]
    assert wait_for(lambda: status(admin, "amo")["instances"][0]["status"]["numUserExceptions"] == 1)
    assert status(admin, "amo")["instances"][0]["status"]["numReceived"] == len(values)
    assert wait_for(lambda: admin.admin.stats("amo-a")["subscriptions"]["public/default/amo"]["msgBacklog"] == 0)
    admin.delete("public", "default", "amo")


def test_retain_ordering_keeps_the_input_order_with_two_instances(fn_broker: Standalone,
                                                                   client: pulsar.Client) -> None:
    admin = functions_admin(fn_broker.admin_url)
    deploy(admin, "ordered", "exclamation.py", "exclamation.ExclamationFunction", inputs=["ord-in"],
           output="ord-out", parallelism=2, retainOrdering=True)
    out = client.subscribe("ord-out", "check")
    rng = random.Random()
    values = words(rng, 200)
    send_all(client, "ord-in", values, rng)
    assert [m.data().decode() for m in receive_all(out, len(values))] == [f"{v}!" for v in values]
    assert status(admin, "ordered")["numRunning"] == 2
    admin.delete("public", "default", "ordered")


@pytest.mark.parametrize("coordinator", ["on", "off"])
def test_effectively_once_retries_a_failed_message_in_order(fn_broker: Standalone, broker_factory: Any,
                                                            coordinator: str) -> None:
    """Every output is there once, in input order, the failed message retried before later
    ones. On transactions (the standalone's default) the try's transaction aborts and the
    instance retries it; on deduplication (no coordinator) a redelivered message alone would
    come after later ones, and its output (a lower sequence id) would be dropped as a
    duplicate: the instance restarts instead."""
    broker = fn_broker if coordinator == "on" else broker_factory("transactionCoordinatorEnabled=false")
    client = make_client(broker.url)
    admin = functions_admin(broker.admin_url)
    deploy(admin, "eo-retry", "fails_once.py", "fails_once.FailsOnce", inputs=["eor-in"], output="eor-out",
           processingGuarantees="EFFECTIVELY_ONCE")
    out = client.subscribe("eor-out", "check")
    values = [f"e-{i}" for i in range(20)]
    send_all(client, "eor-in", values, random.Random())
    assert [m.data().decode() for m in receive_all(out, len(values))] == values
    with pytest.raises(pulsar.Timeout):
        out.receive(500)
    shown = status(admin, "eo-retry")["instances"][0]["status"]
    assert shown["numRestarts"] == (0 if coordinator == "on" else 1)
    assert any("first try of e-7 fails" in e["exceptionString"] for e in shown["latestUserExceptions"])
    admin.delete("public", "default", "eo-retry")
    client.close()


def test_at_least_once_keeps_an_input_whose_output_failed(fn_broker: Standalone, client: pulsar.Client) -> None:
    """ATLEAST_ONCE acknowledges an input once its output is stored: an output the broker
    refuses (here the output topic was terminated after the first one) leaves the input to
    come back, and fail again, rather than be acknowledged and lost (issue 40's audit found no
    test that would notice)."""
    admin = functions_admin(fn_broker.admin_url)
    deploy(admin, "alo", "exclamation.py", "exclamation.ExclamationFunction", inputs=["alo-in"], output="alo-out")
    out = client.subscribe("alo-out", "check")
    producer = client.create_producer("alo-in")
    producer.send(b"stored")
    assert receive_all(out, 1)[0].data() == b"stored!"
    admin.admin.terminate("alo-out")
    producer.send(b"refused")

    def failures() -> int:
        return status(admin, "alo")["instances"][0]["status"]["numSystemExceptions"]

    assert wait_for(lambda: failures() >= 3, timeout=30), "refused, redelivered, refused again..."
    assert admin.admin.stats("alo-in")["subscriptions"]["public/default/alo"]["msgBacklog"] == 1, "never acknowledged"
    assert "output to alo-out failed" in status(admin, "alo")["instances"][0]["status"]["latestSystemExceptions"][-1][
        "exceptionString"]
