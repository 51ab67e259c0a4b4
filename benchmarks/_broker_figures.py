"""What a magnetar broker says of itself during a benchmark cell, from its /metrics: its mean
publish latency (a SEND, or a Kafka Produce, read to its answer written), its event-loop
lag probes, and its young collections (count, objects freed: garbage cycles a request path
leaves show there). Figures the client's side cannot show: they stay near the broker's own
work when other jobs slow the clients down, and a loop stall shows as a late probe."""

from __future__ import annotations

import re
import urllib.request


def broker_figures(admin_url: str) -> dict[str, float]:
    """The broker's cumulative event-loop lag histogram and publish-latency count and sum
    (empty for versions without them)."""
    try:
        with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    found = {bound: float(value) for bound, value in
             re.findall(r'^magnetar_event_loop_lag_seconds_bucket\{[^}]*le="([^"]+)"\} (\S+)$', text, re.M)}
    for part in ("count", "sum"):
        if match := re.search(rf"^pulsar_broker_publish_latency_{part}\{{[^}}]*\}} (\S+)$", text, re.M):
            found[f"publish_{part}"] = float(match.group(1))
    for name, key in (("collections", "gc_young"), ("objects_collected", "gc_young_freed")):
        if match := re.search(rf'^python_gc_{name}_total\{{[^}}]*generation="0"\}} (\S+)$', text, re.M):
            found[key] = float(match.group(1))
    return found


def broker_between(before: dict[str, float], after: dict[str, float]) -> dict:
    """What the broker saw during a cell: its mean publish latency (SEND read to receipt
    written), its young collections and the objects they freed, and how late its loop-lag
    probe (every 100 ms) ran: probes taken, how many were over 5 ms, the bucket bound the
    worst one fell under."""
    if not before or not after:
        return {}
    counts = {key: after[key] - before.get(key, 0) for key in after}
    out: dict = {}
    if counts.get("publish_count"):
        out["broker_publish_mean_ms"] = round(counts["publish_sum"] / counts["publish_count"], 3)
    probes = counts.get("+Inf", 0)
    worst = next((bound for bound, n in counts.items() if n == probes and not bound.startswith(("publish", "gc_"))),
                 "+Inf")
    if "gc_young" in counts:
        out["broker_young_collections"] = int(counts["gc_young"])
        out["broker_young_collections_freed"] = int(counts["gc_young_freed"])
    return {**out, "broker_loop_probes": int(probes), "broker_loop_lag_over_5ms": int(probes - counts.get("0.005", 0)),
            "broker_loop_lag_max_under_s": worst}
