// Pulsar Functions through `/admin/v3/functions`: every namespace's functions, and a
// function's instances (status, rates worked out between two refreshes, latest exceptions),
// its start/stop/restart (asked first) and a look-up of its state by key.

import { ApiError, json, optionalJson, path, request } from "./api.js";
import { count, el, facts, link, rate, searchBox, table } from "./dom.js";

const MAX_EXCEPTIONS = 20;

function when(millis) {
  return millis ? new Date(millis).toISOString() : "never";
}

/** The functions of `namespaces` (all the role may list when not given), each with its status
 * (null: not allowed): [{tenant, namespace, name, status}]. */
export async function functionStatuses(namespaces = null) {
  if (namespaces === null) {
    const tenants = (await optionalJson("admin/v2/tenants")) ?? [];
    namespaces = (await Promise.all(tenants.map((tenant) => optionalJson(path("admin/v2/namespaces", tenant)))))
      .flat().filter(Boolean);
  }
  const lists = await Promise.all(namespaces.map(async (full) => {
    const [tenant, namespace] = full.split("/");
    const names = (await optionalJson(path("admin/v3/functions", tenant, namespace))) ?? [];
    return names.map((name) => ({ tenant, namespace, name }));
  }));
  const found = lists.flat();
  const statuses = await Promise.all(found.map((item) =>
    optionalJson(path("admin/v3/functions", item.tenant, item.namespace, item.name, "status"))));
  return found.map((item, i) => ({ ...item, status: statuses[i] }));
}

export function functionList() {
  let filter = "";
  let items = [];
  const body = el("div");
  const draw = () => body.replaceChildren(table(["Function", "Namespace", "Running", "Received", "Exceptions"],
    items.filter((item) => `${item.tenant}/${item.namespace}/${item.name}`.toLowerCase().includes(filter)).map((item) => [
      link(item.name, "function", item.tenant, item.namespace, item.name), `${item.tenant}/${item.namespace}`,
      item.status === null ? "(not allowed)" : `${item.status.numRunning} of ${item.status.numInstances}`,
      item.status === null ? "" : count(item.status.instances.reduce((sum, i) => sum + i.status.numReceived, 0)),
      item.status === null ? "" : count(item.status.instances.reduce((sum, i) =>
        sum + i.status.numUserExceptions + i.status.numSystemExceptions, 0)),
    ]), "no functions"));
  async function refresh() {
    items = await functionStatuses();
    draw();
  }
  const node = el("section", { "data-testid": "list" }, searchBox("Search functions", (value) => {
    filter = value;
    draw();
  }), body);
  return { title: "Functions", node, refresh };
}

function exceptions(status) {
  const thrown = status.instances.flatMap((instance) => [
    ...instance.status.latestUserExceptions.map((e) => ({ ...e, instance: instance.instanceId, kind: "user" })),
    ...instance.status.latestSystemExceptions.map((e) => ({ ...e, instance: instance.instanceId, kind: "system" })),
  ]).sort((a, b) => b.timestampMs - a.timestampMs).slice(0, MAX_EXCEPTIONS);
  return table(["Time", "Instance", "Kind", "Exception"], thrown.map((e) => [when(e.timestampMs), String(e.instance), e.kind,
    el("pre", { class: "payload" }, e.exceptionString)]), "none");
}

export function functionView([tenant, namespace, name]) {
  const url = (...rest) => path("admin/v3/functions", tenant, namespace, name, ...rest);
  const outcome = el("p", { class: "outcome", role: "status", "data-testid": "function-outcome" });
  const body = el("div");
  let last = null; // received counts of the previous refresh, for rates

  const verb = (label, suffix, instance = null) => el("button", { type: "button", onclick: async () => {
    const which = instance === null ? `every instance of function ${name}` : `instance ${instance} of function ${name}`;
    if (!window.confirm(`${label} ${which}?`)) return;
    try {
      await request(instance === null ? url(suffix) : url(String(instance), suffix), "POST");
      outcome.textContent = `${label}: done`;
    } catch (error) {
      outcome.textContent = `${label}: refused: ${error.message}`;
    }
    refresh().catch((failure) => { outcome.textContent = `error: ${failure.message}`; });
  } }, label);

  const key = el("input", { type: "text", "aria-label": "State key", placeholder: "key" });
  const state = el("pre", { class: "payload", "data-testid": "state" });
  const lookup = el("form", { class: "controls", onsubmit: async (event) => {
    event.preventDefault();
    try {
      const found = await json(url("state", key.value));
      state.textContent = JSON.stringify(found, null, 2);
    } catch (error) {
      state.textContent = error instanceof ApiError && error.status === 404 ? `no state under ${key.value}` : `refused: ${error.message}`;
    }
  } }, el("label", {}, "Key ", key), el("button", { type: "submit" }, "Look up"));

  async function refresh() {
    const [config, status] = await Promise.all([json(url()), json(url("status"))]);
    const now = performance.now();
    const received = new Map(status.instances.map((i) => [i.instanceId, i.status.numReceived]));
    const perSecond = (instance) => (last === null ? null
      : Math.max(0, instance.status.numReceived - (last.received.get(instance.instanceId) ?? 0)) / ((now - last.time) / 1000));
    const rows = status.instances.map((instance) => {
      const s = instance.status;
      const speed = perSecond(instance);
      return [String(instance.instanceId), s.running ? "running" : `stopped${s.error ? `: ${s.error}` : ""}`,
        speed === null ? "…" : rate(speed), count(s.numReceived), count(s.numSuccessfullyProcessed),
        count(s.numUserExceptions), count(s.numSystemExceptions), count(s.numRestarts),
        `${(Number(s.averageLatency) || 0).toFixed(2)} ms`, when(s.lastInvocationTime),
        el("span", { class: "actions" }, verb("Restart", "restart", instance.instanceId))];
    });
    last = { time: now, received };
    body.replaceChildren(
      facts([["Running", `${status.numRunning} of ${status.numInstances} instances`],
        ["Inputs", [...(config.inputs ?? []), ...Object.keys(config.inputSpecs ?? {})].join(", ") || "(none)"],
        ["Output", config.output || "(none)"], ["Class", config.className ?? ""], ["Runtime", config.runtime ?? ""]]),
      el("h2", {}, "Instances"),
      table(["Instance", "State", "Rate in", "Received", "Processed", "User exceptions", "System exceptions", "Restarts",
        "Average latency", "Last invocation", "Actions"], rows, "no instances"),
      el("p", { class: "actions" }, verb("Start", "start"), verb("Stop", "stop"), verb("Restart", "restart")),
      el("h2", {}, "Latest exceptions"), exceptions(status));
  }
  return { title: `Function ${tenant}/${namespace}/${name}`,
    node: el("div", {}, outcome, body, el("h2", {}, "State"), lookup, state), refresh };
}
