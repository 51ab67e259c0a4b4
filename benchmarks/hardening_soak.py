"""What a careless or hostile client costs the broker, and the bystanders beside it.

    .venv/bin/python benchmarks/hardening_soak.py [--seconds 10] [--rate 2000]

Starts a real `magnetar standalone`, runs an official-client producer/consumer pair
at a fixed rate in its own process for the whole run, and applies one attack per
phase. Prints ONE JSON object with, per phase (a quiet baseline first, so every
figure has its comparison in the same run): the pair's end-to-end latency p50/p99
and messages per second, the broker's RSS and open fds at the end of the phase,
and what the attack achieved (connections kept, sends refused, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import socket
import statistics
import struct
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _broker_process import open_fds, rss_mb
from rawclient import RawClient
from standalone import Standalone

from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
PAIR_TOPIC = "persistent://public/default/bystanders"


# ---------------------------------------------------------------- the bystander pair (own process)
def pair(url: str, rate: int, stop, out) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(PAIR_TOPIC, "bystander", receiver_queue_size=1000)
    producer = client.create_producer(PAIR_TOPIC, batching_enabled=False, block_if_queue_full=True,
                                      send_timeout_millis=60_000)
    failures = []

    def sent(result, _msg_id) -> None:
        if result != pulsar.Result.Ok:
            failures.append(str(result))

    interval, next_at, sequence = 1 / rate, time.perf_counter(), 0
    while not stop.is_set():
        now = time.perf_counter()
        if now >= next_at:
            producer.send_async(str(time.time_ns()).encode(), sent)
            sequence += 1
            next_at += interval
        with contextlib.suppress(pulsar.Timeout):
            msg = consumer.receive(timeout_millis=1)
            out.put((time.time(), (time.time_ns() - int(msg.data())) / 1e6))
            consumer.acknowledge(msg)
    producer.flush()
    deadline = time.monotonic() + 30
    received = 0
    while time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            break
        out.put((time.time(), (time.time_ns() - int(msg.data())) / 1e6))
        consumer.acknowledge(msg)
        received += 1
    out.put(("done", sequence, failures))
    client.close()


# ---------------------------------------------------------------- attacks: each returns what it achieved
def _held(raws: list[RawClient]) -> int:
    kept = 0
    for raw in raws:
        raw.sock.setblocking(False)
        try:
            kept += raw.sock.recv(65536) != b""
        except BlockingIOError:
            kept += 1
        except OSError:
            pass
    return kept


def partial_frames(broker: Standalone, seconds: float) -> dict:
    """100 connections each sending 4 MiB of a 5 MiB frame and then nothing."""
    raws = []
    for _ in range(100):
        raw = RawClient(broker.url)
        raw.connect()
        raw.sock.settimeout(0.2)
        with contextlib.suppress(OSError):
            raw.write(struct.pack(">I", 5 * 1024 * 1024) + b"\0" * (4 * 1024 * 1024))
        raws.append(raw)
    time.sleep(seconds)
    result = {"connections": len(raws), "still_open": _held(raws)}
    for raw in raws:
        raw.close()
    return result


def tricklers(broker: Standalone, seconds: float) -> dict:
    """50 connections each sending one byte of a frame every 0.5 s."""
    raws = []
    for _ in range(50):
        raw = RawClient(broker.url)
        raw.connect()
        raw.write(struct.pack(">I", 1000))
        raws.append(raw)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for raw in raws:
            with contextlib.suppress(OSError):
                raw.write(b"\x08")
        time.sleep(0.5)
    result = {"connections": len(raws), "still_open": _held(raws)}
    for raw in raws:
        raw.close()
    return result


def connection_flood(broker: Standalone, seconds: float) -> dict:
    """As many idle connections as the broker will take, up to 2000."""
    socks = []
    deadline = time.monotonic() + seconds
    with contextlib.suppress(OSError):
        while len(socks) < 2000 and time.monotonic() < deadline:
            socks.append(socket.create_connection(("127.0.0.1", broker.port), timeout=2))
    time.sleep(max(0.0, deadline - time.monotonic()))
    opened = len(socks)
    for sock in socks:
        sock.close()
    return {"opened": opened}


def poison_sends(broker: Standalone, seconds: float) -> dict:
    """Batches claiming 2^31-1 messages in one byte, as fast as the broker answers."""
    raw = RawClient(broker.url)
    raw.connect()
    raw.create_producer("persistent://public/default/poison")
    metadata = pb.MessageMetadata(producer_name="raw", sequence_id=0, publish_time=0, num_messages_in_batch=2**31 - 1)
    entry = build_entry(metadata, b"x")
    refused = stored = 0
    deadline = time.monotonic() + seconds
    sequence = 0
    while time.monotonic() < deadline:
        send = pb.CommandSend(producer_id=0, sequence_id=sequence, num_messages=2**31 - 1)
        raw.command(T(type=T.SEND, send=send), entry)
        answer = raw.next_frame()
        if answer is None:
            break
        refused += answer.command.type == T.SEND_ERROR
        stored += answer.command.type == T.SEND_RECEIPT
        sequence += 1
    raw.close()
    return {"sent": sequence, "refused": refused, "stored": stored}


def _http(method: str, url: str, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def huge_partitions(broker: Standalone, seconds: float) -> dict:
    """A trillion partitions asked for, then namespace listings for the rest of the phase."""
    base = f"{broker.admin_url}/admin/v2/persistent/public/default"
    status = _http("PUT", f"{base}/huge/partitions", b"1000000000000")
    listings, slowest = 0, 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        _http("GET", base)
        slowest = max(slowest, time.monotonic() - started)
        listings += 1
    return {"create_status": status, "listings": listings, "slowest_listing_s": round(slowest, 3)}


def many_topics(broker: Standalone, seconds: float) -> dict:
    """One message on each of as many new topics as the phase allows (up to 3000)."""
    client = pulsar.Client(broker.url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    written = 0
    deadline = time.monotonic() + seconds
    while written < 3000 and time.monotonic() < deadline:
        producer = client.create_producer(f"persistent://public/default/many-{written}", batching_enabled=False)
        producer.send(b"x")
        producer.close()
        written += 1
    client.close()
    return {"topics": written}


def bad_names(broker: Standalone, seconds: float) -> dict:
    """Producers on 1 MB, NUL and '..' topic names."""
    names = ["persistent://public/default/" + "y" * 1_000_000, "persistent://public/default/a\x00b",
             "persistent://../default/t"]
    raw = RawClient(broker.url)
    raw.connect()
    refused = asked = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and asked < 300:
        name = names[asked % len(names)]
        raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=name, producer_id=asked, request_id=asked)))
        frame = raw.next_frame()
        refused += frame is not None and frame.command.type == T.ERROR
        asked += 1
    raw.close()
    return {"asked": asked, "refused": refused}


def quiet(_broker: Standalone, seconds: float) -> dict:
    time.sleep(seconds)
    return {}


PHASES: dict[str, Callable[[Standalone, float], dict]] = {
    "baseline": quiet,
    "partial_frames": partial_frames,
    "tricklers": tricklers,
    "connection_flood": connection_flood,
    "poison_sends": poison_sends,
    "huge_partitions": huge_partitions,
    "bad_topic_names": bad_names,
    "many_topics": many_topics,
    "after": quiet,
}


def latency_summary(samples: list[float], seconds: float) -> dict:
    if not samples:
        return {"messages_per_s": 0}
    ordered = sorted(samples)
    return {
        "messages_per_s": round(len(samples) / seconds, 1),
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "max_ms": round(ordered[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--rate", type=int, default=2000, help="bystander messages per second")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = Standalone(Path(tmp) / "data", ["keepAliveIntervalSeconds=5"]).start()
        stop, out = mp.Event(), mp.Queue()
        bystanders = mp.Process(target=pair, args=(broker.url, args.rate, stop, out))
        bystanders.start()
        samples: list[tuple[float, float]] = []
        report: dict[str, object] = {"seconds_per_phase": args.seconds, "bystander_rate": args.rate,
                                     "keepAliveIntervalSeconds": 5, "phases": {}}
        time.sleep(2)  # the pair connects and warms up
        windows = {}
        for name, attack in PHASES.items():
            started = time.time()
            achieved = attack(broker, args.seconds)
            windows[name] = (started, time.time())
            report["phases"][name] = {  # type: ignore[index]
                "attack": achieved,
                "broker_rss_mb": round(rss_mb(broker.proc.pid), 1),
                "broker_open_fds": open_fds(broker.proc.pid),
            }
        stop.set()
        done = None
        while done is None:  # every sample, including those still in the queue when a phase ended
            item = out.get(timeout=60)
            if item[0] == "done":
                done = item
            else:
                samples.append(item)
        bystanders.join(60)
        for name, (started, ended) in windows.items():
            window = [latency for at, latency in samples if isinstance(at, float) and started <= at <= ended]
            report["phases"][name]["bystanders"] = latency_summary(window, ended - started)  # type: ignore[index]
        report["bystanders_sent"] = done[1]
        report["bystanders_received"] = len(samples)
        report["bystander_send_failures"] = done[2][:5]
        report["broker_alive"] = broker.proc.poll() is None
        log = broker.log()
        report["broker_log_mb"] = round(len(log) / 1e6, 2)
        broker.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
