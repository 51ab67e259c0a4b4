"""Functions across broker restarts: deployments, code and state come back from the
metadata store after SIGTERM and SIGKILL, instances never outlive their broker, and no input
is lost (EFFECTIVELY_ONCE: none is duplicated either)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pulsar
import pytest
from fn_helpers import CODE, deploy, functions_admin, make_client, status, wait_consumers
from polling import wait_for
from procfs import descendants
from standalone import Standalone

from magnetar.admin_client import AdminError
from magnetar.storage.metadata_store import SqliteMetadataStore


def start(brokers: list[Standalone], data_dir: Path, *config: str) -> Standalone:
    broker = Standalone(data_dir, list(config)).start()
    brokers.append(broker)
    return broker


def instance_pids(broker: Standalone) -> list[int]:
    """Every process the broker started (instances, their sandboxes), read before it goes."""
    assert broker.proc is not None
    return [pid for pid in descendants(broker.proc.pid) if pid != broker.proc.pid]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_word_count_state_and_deployment_survive_a_restart(brokers: list[Standalone], tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = start(brokers, data_dir)
    config = deploy(functions_admin(broker.admin_url), "wordcount", "word_count.py", "word_count.WordCountFunction",
                    inputs=["sentences"])
    rng = random.Random()
    vocabulary = [f"w{i}" for i in range(15)]
    expected: Counter[str] = Counter()

    def send(url: str, count: int) -> None:
        client = make_client(url)
        producer = client.create_producer("sentences")
        for _ in range(count):
            sentence = rng.choices(vocabulary, k=rng.randint(1, 6))
            expected.update(sentence)
            producer.send_async(" ".join(sentence).encode(), None)
        producer.flush()
        client.close()

    def counted(url: str) -> bool:
        admin = functions_admin(url)
        try:
            return all(admin.query_state("public", "default", "wordcount", word)["numberValue"] == count
                       for word, count in expected.items())
        except AdminError as error:  # 404: a word not counted yet
            assert error.status == 404, error
            return False

    send(broker.url, 40)
    assert wait_for(lambda: counted(broker.admin_url), timeout=30)
    pids = instance_pids(broker)
    assert pids
    assert broker.stop() == 0
    assert not any(alive(pid) for pid in pids), "a stopped broker stops its instances"
    assert "function public/default/wordcount:0 stopped (exit code 0)" in broker.log(), "and they end cleanly"

    broker = start(brokers, data_dir)
    admin = functions_admin(broker.admin_url)
    assert admin.list("public", "default") == ["wordcount"]
    assert counted(broker.admin_url)
    wait_consumers(admin.admin, config, 1)
    send(broker.url, 40)
    assert wait_for(lambda: counted(broker.admin_url), timeout=30)


def test_sigkill_of_the_broker_loses_and_duplicates_nothing_effectively_once(
        brokers: list[Standalone], tmp_path: Path) -> None:
    """On deduplication (no transaction coordinator); test_functions_transactions has the
    same on transactions."""
    data_dir = tmp_path / "data"
    broker = start(brokers, data_dir, "transactionCoordinatorEnabled=false")
    admin = functions_admin(broker.admin_url)
    admin.admin.create_partitioned_topic("eo-in", 2)  # one output producer a partition, each deduplicated
    config = deploy(admin, "eo", "slow_identity.py", "slow_identity", inputs=["eo-in"], output="eo-out",
                    processingGuarantees="EFFECTIVELY_ONCE")
    client = make_client(broker.url)
    producer = client.create_producer("eo-in")
    values = [f"m-{i}-{random.randrange(10**9)}" for i in range(400)]
    for i, value in enumerate(values):
        producer.send_async(value.encode(), None, partition_key=f"k{i % 7}")
    producer.flush()
    client.close()
    assert wait_for(lambda: status(admin, "eo")["instances"][0]["status"]["numSuccessfullyProcessed"] >= 50)
    pids = instance_pids(broker)
    assert pids
    broker.stop(signal.SIGKILL)
    assert wait_for(lambda: not any(alive(pid) for pid in pids), timeout=10), "instances end with their broker"

    broker = start(brokers, data_dir, "transactionCoordinatorEnabled=false")
    admin = functions_admin(broker.admin_url)
    wait_consumers(admin.admin, config, 1)
    assert wait_for(lambda: all(admin.admin.stats(f"eo-in-partition-{i}")["subscriptions"]["public/default/eo"]
                                ["msgBacklog"] == 0 for i in range(2)), timeout=60)
    client = make_client(broker.url)
    reader = client.create_reader("eo-out", pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(10000).data().decode())
    client.close()
    assert Counter(got) == Counter(values)


def test_output_deduplication_follows_the_mode_each_start_runs_in(brokers: list[Standalone], tmp_path: Path) -> None:
    """EFFECTIVELY_ONCE on transactions leaves the output topic's deduplication alone (it
    would check every output message for nothing); the same deployment restored by a broker
    without the coordinator runs on deduplication, so it turns it on then."""
    data_dir = tmp_path / "data"
    broker = start(brokers, data_dir, "transactionCoordinatorEnabled=true")
    admin = functions_admin(broker.admin_url)
    admin.admin.create_partitioned_topic("mode-in", 2)
    config = deploy(admin, "mode", "exclamation.py", "exclamation.ExclamationFunction", inputs=["mode-in"],
                    output="mode-out", processingGuarantees="EFFECTIVELY_ONCE")
    wait_consumers(admin.admin, config, 1)
    assert admin.admin.get_topic_policy("mode-out", "deduplicationEnabled") is None
    broker.stop()

    broker = start(brokers, data_dir, "transactionCoordinatorEnabled=false")
    admin = functions_admin(broker.admin_url)
    wait_consumers(admin.admin, config, 1)
    assert admin.admin.get_topic_policy("mode-out", "deduplicationEnabled") is True


def test_stored_functions_that_no_longer_load_neither_stop_the_broker_nor_stay(
        brokers: list[Standalone], tmp_path: Path) -> None:
    """What earlier versions could store (a config of other rules, a function named `..`
    whose start failed with `File exists`, a config naming another function, no code, not
    JSON at all) is reported and skipped at start; the good one runs; each can be deleted."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    code = (CODE / "exclamation.py").read_bytes()
    good = {"tenant": "public", "namespace": "default", "name": "good", "className": "exclamation.ExclamationFunction",
            "inputs": ["good-in"], "py": "exclamation.py"}
    stored = {"old": ({"name": "old", "planet": "x"}, code), "..": ({**good, "name": ".."}, code),
              "mismatch": ({**good, "name": "other"}, code), "codeless": ({**good, "name": "codeless"}, None),
              "good": (good, code)}
    store = SqliteMetadataStore(data_dir / "metadata.db")
    for name, (config, package) in stored.items():
        store.put(f"/functions/meta/public/default/{name}",
                  json.dumps({"config": config, "functionId": name, "version": 0}).encode())
        if package is not None:
            store.put(f"/functions/code/public/default/{name}", package)
    store.put("/functions/meta/public/default/garbled", b"\xff not json")
    store.close()
    # what a broker SIGKILLed while bubblewrap set a sandbox up may leave: a process naming the function's files
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                 str(data_dir / "functions" / "public" / "default" / "good" / "package" / "x.py")])
    broker = start(brokers, data_dir)
    assert leftover.wait(timeout=10) == -signal.SIGKILL, "the worker sweeps what an earlier broker left"
    assert f"killed 1 process(es) an earlier broker of this data directory left running: [{leftover.pid}]" in \
        broker.log()
    admin = functions_admin(broker.admin_url)
    wait_consumers(admin.admin, good, 1)
    log = broker.log()
    for name, reason in (("old", "its stored config no longer loads"), ("..", "its stored config no longer loads"),
                         ("mismatch", "its stored config names another function"),
                         ("codeless", "its code is missing"), ("garbled", "its stored config no longer loads")):
        assert f"function public/default/{name} not started: {reason}" in log, name
    assert sorted(admin.list("public", "default")) == sorted([*stored, "garbled"])
    with pytest.raises(AdminError) as refused:
        admin.status("public", "default", "codeless")
    assert refused.value.status == 400 and "not running" in refused.value.reason
    for name in [*stored, "garbled"]:
        admin.delete("public", "default", name)
    assert admin.list("public", "default") == []
    assert broker.proc is not None and broker.proc.poll() is None


@pytest.mark.parametrize("isolation", ["bubblewrap", "none"])
def test_an_instance_dies_with_its_broker_even_while_it_imports(brokers: list[Standalone], tmp_path: Path,
                                                                 isolation: str) -> None:
    """Issue 40 item 4: killed while an instance imported its code, the broker left it alive
    (it looked for its parent only after the import), to reconnect to the next broker and go
    on after a DELETE. Sandboxed or not, the instance dies with the broker, in any phase,
    even while its code keeps every other thread of the process from running."""
    data_dir = tmp_path / "data"
    broker = start(brokers, data_dir, f"functionInstanceIsolation={isolation}")
    admin = functions_admin(broker.admin_url)
    admin.create({"tenant": "public", "namespace": "default", "name": "slow", "className": "slow_start.process",
                  "inputs": ["slow-in"]}, CODE / "slow_start.py")
    assert wait_for(lambda: "importing slowly" in broker.log(), timeout=30)
    pids = instance_pids(broker)
    assert pids
    broker.stop(signal.SIGKILL)
    assert wait_for(lambda: not any(alive(pid) for pid in pids), timeout=5), "instances end with their broker"
