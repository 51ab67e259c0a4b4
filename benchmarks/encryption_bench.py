"""What end-to-end encryption costs per message, magnetar.client against the official client.

    .venv/bin/python benchmarks/encryption_bench.py [--quick] [--messages N] [--rounds R] [--size BYTES]

Starts one `magnetar standalone`; each run is its own process (one client's threads never weigh
on the other's), the clients taking turns going first, R rounds (medians reported). Messages of
--size bytes (default 1 KiB), unbatched, so every message is one entry encrypted on its own
under an RSA-2048 key (the official client knows no EC keys):

- produce: send_async with a callback, then flush, plain and encrypted; the client process's CPU
  per message of each, and `encrypt_us` = encrypted minus plain;
- consume: receive() and acknowledge() of a topic filled beforehand by the official client,
  plain and encrypted; `decrypt_us` = encrypted minus plain.

Prints ONE JSON object with, per client, the medians of those microseconds per message and of
the differences (taken within each round), and the ratios magnetar / official of the
encryption and decryption costs (the issue's aim: within 1.5x). The differences are small
beside the whole per-message cost: on a loaded machine run more rounds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import Standalone

KEY_NAME = "bench"


def _module(kind: str) -> Any:
    if kind == "official":
        import pulsar  # noqa: PLC0415

        return pulsar
    import magnetar.client  # noqa: PLC0415

    return magnetar.client


def _client(kind: str, url: str) -> Any:
    module = _module(kind)
    if kind == "official":
        return module.Client(url, operation_timeout_seconds=30, logger=module.ConsoleLogger(module.LoggerLevel.Error))
    return module.Client(url, operation_timeout_seconds=30)


def _reader(kind: str, keys: Path) -> Any:
    return _module(kind).CryptoKeyReader(str(keys / "public.pem"), str(keys / "private.pem"))


def run_produce(kind: str, url: str, topic: str, count: int, size: int, keys: str | None) -> float:
    """CPU microseconds per message of producing `count` messages (encrypted with `keys`)."""
    client = _client(kind, url)
    sealing = {} if keys is None else {"encryption_key": KEY_NAME, "crypto_key_reader": _reader(kind, Path(keys))}
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True,
                                      max_pending_messages=5000, send_timeout_millis=120_000, **sealing)
    payload = os.urandom(size)
    producer.send(payload)  # connection, first round trip and the data key outside the timing
    done = [0]

    def callback(result: Any, _message_id: Any) -> None:
        done[0] += 1

    cpu0 = time.process_time()
    for _ in range(count):
        producer.send_async(payload, callback)
    producer.flush()
    cpu = time.process_time() - cpu0
    client.close()
    if done[0] != count:
        raise RuntimeError(f"{kind}: {done[0]} of {count} sent")
    return cpu / count * 1e6


def run_consume(kind: str, url: str, topic: str, count: int, keys: str | None) -> float:
    """CPU microseconds per message of receiving and acknowledging `count` messages."""
    client = _client(kind, url)
    module = _module(kind)
    consumer = client.subscribe(topic, f"bench-{uuid.uuid4().hex[:6]}",
                                initial_position=module.InitialPosition.Earliest,
                                crypto_key_reader=None if keys is None else _reader(kind, Path(keys)))
    consumer.acknowledge(consumer.receive(30_000))  # the data key is unwrapped outside the timing
    cpu0 = time.process_time()
    for _ in range(count - 1):
        consumer.acknowledge(consumer.receive(30_000))
    cpu = time.process_time() - cpu0
    client.close()
    return cpu / (count - 1) * 1e6


def fill(url: str, topic: str, count: int, size: int, keys: str | None) -> None:
    client = _client("official", url)
    sealing = {} if keys is None else {"encryption_key": KEY_NAME, "crypto_key_reader": _reader("official", Path(keys))}
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True, **sealing)
    payload = os.urandom(size)
    for _ in range(count):
        producer.send_async(payload, None)
    producer.flush()
    client.close()


def _child(queue: mp.Queue, fn: str, args: tuple) -> None:
    try:
        queue.put(("ok", globals()[fn](*args)))
    except BaseException as exc:
        queue.put(("error", repr(exc)))


def in_process(fn: str, *args: Any) -> float:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, fn, args))
    proc.start()
    status, result = queue.get(timeout=900)
    proc.join(60)
    if status != "ok":
        raise RuntimeError(f"{fn}: {result}")
    return result


def write_keys(directory: Path) -> None:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

    key = rsa.generate_private_key(65537, 2048)
    (directory / "private.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (directory / "public.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer messages and one round (a smoke run)")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    count = args.messages or (2_000 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 3)
    if count < 2 or rounds < 1 or args.size < 0:
        parser.error("--messages must be at least 2, --rounds at least 1, --size not negative")
    data = Path(tempfile.mkdtemp(prefix="encryption-bench-"))
    write_keys(data)
    keys = str(data)
    broker = Standalone(data / "data", ["journalSyncData=false"]).start()
    samples: dict[str, dict[str, list[float]]] = {kind: {} for kind in ("official", "magnetar")}
    try:
        for round_ in range(rounds):
            kinds = ["official", "magnetar"] if round_ % 2 == 0 else ["magnetar", "official"]
            filled = {}
            for sealed in (None, keys):
                filled[sealed] = f"persistent://public/default/fill-{uuid.uuid4().hex[:8]}"
                fill(broker.url, filled[sealed], count, args.size, sealed)
            for kind in kinds:
                for label, sealed in (("plain", None), ("encrypted", keys)):
                    topic = f"persistent://public/default/bench-{uuid.uuid4().hex[:8]}"
                    samples[kind].setdefault(f"produce_{label}", []).append(
                        in_process("run_produce", kind, broker.url, topic, count, args.size, sealed))
                    samples[kind].setdefault(f"consume_{label}", []).append(
                        in_process("run_consume", kind, broker.url, filled[sealed], count, sealed))
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    results: dict[str, Any] = {
        "messages": count, "rounds": rounds, "payload_bytes": args.size, "key": "RSA-2048",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_1min": round(os.getloadavg()[0], 2)},
    }
    for kind, runs in samples.items():
        medians = {f"{name}_us": round(statistics.median(values), 2) for name, values in runs.items()}
        results[kind] = medians | {  # differences within each round (same minute, same load), then their median
            f"{cost}_us": round(statistics.median(sealed - plain for sealed, plain in zip(
                runs[f"{work}_encrypted"], runs[f"{work}_plain"], strict=True)), 2)
            for cost, work in (("encrypt", "produce"), ("decrypt", "consume"))}
    for cost in ("encrypt_us", "decrypt_us"):
        theirs = results["official"][cost]
        results[f"ratio_{cost.removesuffix('_us')}"] = round(results["magnetar"][cost] / theirs, 2) if theirs > 0 \
            else None
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
