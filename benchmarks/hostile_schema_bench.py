"""What a large schema costs the other clients of a broker: the loop lag it causes while
the broker checks it, side by side for several source trees (say main's and a branch's).

For each tree (`--src DIR`, put first on the broker's PYTHONPATH) and each record size
(`--fields N`, fields `{"name": "fN", "type": "long"}`), on a fresh `magnetar standalone`:
- `admin`: POST /admin/v2/schemas/public/default/t{N}/compatibility of the record plus one
  optional field, against the record registered before (FULL: both directions compared);
- `producer`: a raw PRODUCER carrying the record plus two optional fields, on that topic;
- `idle` (once): a second of nothing, the prober's own slowest answer.
Meanwhile a prober asks GET /admin/v2/clusters on its own kept-alive connection, one request
after the other: `lag_ms` is its slowest answer during the request (what every other tenant
waited), beside the request's own time and answer. A broker that checks on its event loop
answers the prober only once the check is done.

    .venv/bin/python benchmarks/hostile_schema_bench.py --src /work/main/src --src src \
        --fields 9000 --fields 12000 --fields 16000

Prints one JSON object, with the load average before and after.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from rawclient import RawClient
from standalone import Standalone

from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


def record(fields: int, optional: int = 0) -> str:
    listed = [{"name": f"f{i}", "type": "long"} for i in range(fields)]
    listed += [{"name": f"o{i}", "type": ["null", "long"], "default": None} for i in range(optional)]
    return json.dumps({"type": "record", "name": "Wide", "fields": listed})


class Prober:
    """GET /admin/v2/clusters back to back on one connection, each request's start and end kept."""

    def __init__(self, admin_url: str) -> None:
        parts = urlsplit(admin_url)
        self._connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
        self.requests: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            self._connection.request("GET", "/admin/v2/clusters")
            self._connection.getresponse().read()
            self.requests.append((start, time.perf_counter()))
            time.sleep(0.002)

    def slowest_ms(self, begin: float, end: float) -> float:
        """The longest request that overlapped [begin, end], once all of those have ended."""
        while not self.requests or self.requests[-1][0] <= end:
            time.sleep(0.005)
        return round(max(e - s for s, e in self.requests if e >= begin and s <= end) * 1000, 1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._connection.close()


def admin(base: str, method: str, path: str, body: object) -> tuple[int, str]:
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
    try:
        connection.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read().decode()[:160]
    finally:
        connection.close()


def producer(url: str, topic: str, definition: str) -> str:
    raw = RawClient(url)
    try:
        raw.connect()
        schema = pb.Schema(name="Wide", type=pb.Schema.Avro, schema_data=definition.encode())
        raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=1,
                                                                   schema=schema)))
        frame = raw.next_frame(timeout=300)
        assert frame is not None
        answer = frame.command
        return "success" if answer.type == T.PRODUCER_SUCCESS else f"{pb.ServerError.Name(answer.error.error)}: " \
                                                                   f"{answer.error.message[:120]}"
    finally:
        raw.close()


def timed(prober: Prober, action) -> dict[str, object]:
    start = time.perf_counter()
    answer = action()
    end = time.perf_counter()
    return {"seconds": round(end - start, 3), "lag_ms": prober.slowest_ms(start, end), "answer": answer}


def run(src: str, sizes: list[int], config: list[str]) -> dict[str, object]:
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {"PYTHONPATH": os.pathsep.join([str(Path(src).resolve()), os.environ.get("PYTHONPATH", "")])}
        broker = Standalone(Path(tmp) / "data", config, env=env).start()
        prober = Prober(broker.admin_url)
        try:
            results["idle"] = timed(prober, lambda: time.sleep(1) or "none")
            for fields in sizes:
                path = f"/admin/v2/schemas/public/default/t{fields}"
                register = timed(prober, lambda path=path, fields=fields: admin(
                    broker.admin_url, "POST", f"{path}/schema", {"type": "AVRO", "schema": record(fields)}))
                check = timed(prober, lambda path=path, fields=fields: admin(
                    broker.admin_url, "POST", f"{path}/compatibility", {"type": "AVRO", "schema": record(fields, 1)}))
                produce = timed(prober, lambda fields=fields: producer(
                    broker.url, f"persistent://public/default/t{fields}", record(fields, 2)))
                results[str(fields)] = {"register": register, "admin": check, "producer": produce}
        finally:
            prober.close()
            broker.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", required=True, help="a source tree (its src/ directory)")
    parser.add_argument("--fields", action="append", type=int, required=True, help="fields of the record")
    parser.add_argument("-c", dest="config", action="append", default=[], help="a broker setting key=value")
    args = parser.parse_args()
    report: dict[str, object] = {"load_before": os.getloadavg()}
    report["runs"] = {src: run(src, args.fields, args.config) for src in args.src}
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
