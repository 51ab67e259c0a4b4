"""Stats as pulsar-admin prints them (FunctionStats: totals over instances, then each
instance's), and the function metrics of /metrics with Pulsar's names."""

from __future__ import annotations

import re
from typing import Any

from magnetar.functions.supervisor import FunctionRuntime
from magnetar.prometheus import label_text, number_text

_COUNTERS = (("receivedTotal", "numReceived"), ("processedSuccessfullyTotal", "numSuccessfullyProcessed"),
             ("systemExceptionsTotal", "numSystemExceptions"), ("userExceptionsTotal", "numUserExceptions"))
_METRICS = (("pulsar_function_received_total", "numReceived"),
            ("pulsar_function_processed_successfully_total", "numSuccessfullyProcessed"),
            ("pulsar_function_system_exceptions_total", "numSystemExceptions"),
            ("pulsar_function_user_exceptions_total", "numUserExceptions"),
            ("pulsar_function_last_invocation", "lastInvocationTime"))


def instance_stats(counted: dict[str, Any]) -> dict[str, Any]:
    stats: dict[str, Any] = {name: counted.get(key, 0) for name, key in _COUNTERS}
    stats["avgProcessLatency"] = counted.get("averageLatency") or None
    stats["lastInvocation"] = counted.get("lastInvocationTime") or None
    stats["userMetrics"] = {name: m["sum"] / m["count"] for name, m in counted.get("userMetrics", {}).items()
                            if m.get("count")}
    return stats


def function_stats(runtime: FunctionRuntime) -> dict[str, Any]:
    instances = [{"instanceId": i.instance_id, "metrics": instance_stats(i.metrics())} for i in runtime.instances]
    totals: dict[str, Any] = {name: sum(i["metrics"][name] for i in instances) for name, _ in _COUNTERS}
    latencies = [i["metrics"]["avgProcessLatency"] for i in instances if i["metrics"]["avgProcessLatency"]]
    totals["avgProcessLatency"] = sum(latencies) / len(latencies) if latencies else None
    totals["lastInvocation"] = max((i["metrics"]["lastInvocation"] or 0 for i in instances), default=0) or None
    totals["instances"] = instances
    return totals


def prometheus(runtimes: list[FunctionRuntime], cluster: str) -> str:
    """The function metrics Pulsar's workers expose, one sample an instance, and each
    `record_metric` name as `pulsar_function_user_metric_<name>_sum` and `_count`."""
    samples = [(_labels(runtime, instance.instance_id, cluster), instance.metrics())
               for runtime in runtimes for instance in runtime.instances]
    lines: list[str] = []
    for metric, key in _METRICS:
        lines.append(f"# TYPE {metric} {'gauge' if key == 'lastInvocationTime' else 'counter'}")
        lines.extend(f"{metric}{{{labels}}} {number_text(counted.get(key) or 0)}" for labels, counted in samples)
    for labels, counted in samples:
        for name, metric in counted.get("userMetrics", {}).items():
            family = "pulsar_function_user_metric_" + _NOT_IN_A_NAME.sub("_", name)
            lines.append(f"{family}_sum{{{labels}}} {number_text(metric['sum'])}")
            lines.append(f"{family}_count{{{labels}}} {number_text(metric['count'])}")
    return "\n".join(lines) + "\n"


#: what a metric name may not hold: a user's `record_metric("latency ms", ...)` must not make the
#: whole /metrics page (the broker's metrics with it) unreadable to Prometheus
_NOT_IN_A_NAME = re.compile(r"[^a-zA-Z0-9_]")


def _labels(runtime: FunctionRuntime, instance_id: int, cluster: str) -> str:
    config = runtime.deployment.config
    return label_text((("cluster", cluster), ("tenant", config.tenant),
                       ("namespace", f"{config.tenant}/{config.namespace}"), ("name", config.name),
                       ("instance_id", str(instance_id)), ("fqfn", config.fqfn)))
