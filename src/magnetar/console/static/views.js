// The overview and the lists: tenants, a tenant's namespaces, a namespace's topics.

import { json, metricSamples, metricSums, optionalJson, path, text, walk } from "./api.js";
import { lineChart } from "./chart.js";
import { bytes, count, el, facts, fill, link, rate, searchBox, table } from "./dom.js";
import { functionStatuses } from "./functions.js";
import { policyPanel } from "./policies.js";

const HISTORY = 60; // samples in the chart: three minutes at a refresh every 3 s
/** A disk with less free than this share, a backlog past this share of its quota: a warning. */
const DISK_FREE_WARNING = 0.1;
const QUOTA_WARNING = 0.8;
/** A function's exception younger than this is a warning. */
const RECENT_EXCEPTION_MS = 5 * 60_000;

function listeners(config) {
  if (config === null) return "(needs a super user's token)";
  const host = config.advertisedAddress || config.bindAddress;
  const port = (scheme, value) => (value ? `${scheme}://${host}:${value}` : null);
  return [port("pulsar", config.brokerServicePort), port("pulsar+ssl", config.brokerServicePortTls),
    port("http", config.webServicePort), port("https", config.webServicePortTls),
    config.kafkaListeners ? `Kafka ${config.kafkaListeners}` : null].filter(Boolean).join(", ");
}

/** Rates between two refreshes, from /metrics' counters (the broker's own rates move once a
 * statsUpdateFrequencyInSecs, a minute by default); the first refresh shows the broker's. */
function rates(sums, last, now) {
  const totals = ["in_messages", "out_messages", "in_bytes", "out_bytes"].map((name) => sums.get(`pulsar_${name}_total`) ?? 0);
  if (last === null || now <= last.time) {
    return { totals, values: ["rate_in", "rate_out", "throughput_in", "throughput_out"].map((name) => sums.get(`pulsar_${name}`) ?? 0) };
  }
  const seconds = (now - last.time) / 1000;
  return { totals, values: totals.map((total, i) => Math.max(0, total - last.totals[i]) / seconds) }; // a topic unloaded restarts its counters
}

/** What needs a look: a disk nearly full, backlogs near their quota, functions failing. */
function warnings(exposition, sums, functions) {
  const found = [];
  const size = sums.get("magnetar_storage_disk_size_bytes") ?? 0;
  const free = sums.get("magnetar_storage_disk_free_bytes") ?? 0;
  if (sums.get("pulsar_broker_storage_writable") === 0) found.push("The disk is full: producers are held until space is freed.");
  else if (size > 0 && free / size < DISK_FREE_WARNING) {
    found.push(`The disk holding the data is nearly full: ${bytes(free)} free of ${bytes(size)}.`);
  }
  const limits = new Map(metricSamples(exposition, "pulsar_storage_backlog_quota_limit")
    .filter((sample) => sample.value > 0).map((sample) => [sample.labels.topic, sample.value]));
  for (const { labels, value } of limits.size ? metricSamples(exposition, "pulsar_storage_backlog_size") : []) {
    const limit = limits.get(labels.topic);
    if (limit && value >= QUOTA_WARNING * limit) {
      found.push(`Topic ${labels.topic}: backlog ${bytes(value)} is ${Math.round((100 * value) / limit)} % of its quota (${bytes(limit)}).`);
    }
  }
  const now = Date.now();
  for (const fn of functions ?? []) {
    for (const instance of fn.status?.instances ?? []) {
      const name = `Function ${fn.tenant}/${fn.namespace}/${fn.name} instance ${instance.instanceId}`;
      const thrown = [...instance.status.latestUserExceptions, ...instance.status.latestSystemExceptions]
        .sort((a, b) => b.timestampMs - a.timestampMs);
      if (!instance.status.running) found.push(`${name} is not running${instance.status.error ? `: ${instance.status.error}` : ""}.`);
      else if (thrown.length && now - thrown[0].timestampMs < RECENT_EXCEPTION_MS) {
        found.push(`${name} is failing: ${thrown[0].exceptionString}`);
      }
    }
  }
  return found;
}

function functionsRunning(functions) {
  if (functions === null) return "(needs a super user's token)";
  const instances = functions.flatMap((fn) => fn.status?.instances ?? []);
  return `${instances.filter((i) => i.status.running).length} of ${instances.length} instances (${count(functions.length)} functions)`;
}

export function overview() {
  const history = { times: [], in: [], out: [] };
  let last = null;
  const body = el("div");

  function draw(version, config, tree, sums, speeds, functions = null, warned = null) {
    const counted = (value) => (tree === null ? "(needs a super user's token)" : count(value));
    const measured = (name, shown = count) => (sums === null ? "…" : shown(sums.get(name)));
    body.replaceChildren(
      facts([
        ["Version", version.trim()],
        ["Listeners", listeners(config)],
        ["Tenants", counted(tree?.tenants.length)],
        ["Namespaces", counted(tree?.namespaces.length)],
        ["Topics", counted(tree?.topics.length)],
        ["Subscriptions", measured("pulsar_subscriptions_count")],
        ["Producers", measured("pulsar_producers_count")],
        ["Consumers", measured("pulsar_consumers_count")],
        ["Backlog", measured("pulsar_msg_backlog", (value) => `${count(value)} entries`)],
        ["Storage", measured("pulsar_storage_size", bytes)],
        ["Disk", sums === null ? "…" : `${bytes(sums.get("magnetar_storage_disk_free_bytes"))} free of ${
          bytes(sums.get("magnetar_storage_disk_size_bytes"))}`],
        ["Functions", sums === null ? "…" : functionsRunning(functions)],
      ]),
      el("h2", {}, "Warnings"),
      warned === null ? el("p", { class: "legend" }, "…") : warned.length === 0 ? el("p", { class: "empty" }, "none")
        : el("ul", { class: "warnings", "data-testid": "warnings" }, warned.map((warning) => el("li", {}, warning))),
      el("h2", {}, "Messages per second"),
      speeds === null ? el("p", { class: "legend" }, "…") : el("p", { class: "legend" },
        el("span", { class: "in", "data-testid": "rate-in" }, `in ${rate(speeds[0])}`), " ",
        el("span", { class: "out", "data-testid": "rate-out" }, `out ${rate(speeds[1])}`), " ",
        el("span", {}, `(${bytes(speeds[2])}/s in, ${bytes(speeds[3])}/s out)`)),
      lineChart(history.times, [{ label: "in", values: history.in, cls: "in" },
        { label: "out", values: history.out, cls: "out" }]));
  }

  async function refresh() {
    const [version, config, tree] = await Promise.all([
      text("admin/v2/brokers/version"), optionalJson("admin/v2/brokers/configuration/runtime"), walk()]);
    if (last === null) draw(version, config, tree, null, null); // the first time, the rest when it comes
    // asked last: on a large broker (15 MB for 10,000 topics) its answer holds the broker's loop a while
    const exposition = await text("metrics");
    const sums = metricSums(exposition);
    const functions = tree === null ? null : await functionStatuses(tree.namespaces);
    const now = performance.now();
    const { totals, values } = rates(sums, last, now);
    last = { time: now, totals };
    history.times = [...history.times, Date.now() / 1000].slice(-HISTORY);
    history.in = [...history.in, values[0]].slice(-HISTORY);
    history.out = [...history.out, values[1]].slice(-HISTORY);
    draw(version, config, tree, sums, values, functions, warnings(exposition, sums, functions));
  }
  return { title: "Overview", node: body, refresh };
}

/** Rows drawn at most: a namespace of 10,000 topics is searched, not scrolled. */
export const MAX_ROWS = 500;

/** A list with a search box that filters it as one types, kept across refreshes. */
function searchable(title, placeholder, load, headings, row) {
  let filter = "";
  let items = [];
  const body = el("div");
  const draw = () => {
    const found = items.filter((item) => item.name.toLowerCase().includes(filter));
    fill(body, table(headings, found.slice(0, MAX_ROWS).map(row), "none found"),
      found.length > MAX_ROWS ? el("p", { class: "empty", "data-testid": "more" },
        `${count(found.length - MAX_ROWS)} more of ${count(found.length)}: type in the search box to narrow them`) : null);
  };
  const node = el("section", { "data-testid": "list" }, searchBox(placeholder, (value) => {
    filter = value;
    draw();
  }), body);
  async function refresh() {
    items = await load();
    draw();
  }
  return { title, node, refresh };
}

export function tenants() {
  return searchable("Tenants", "Search tenants", async () => {
    const names = await json("admin/v2/tenants");
    const namespaces = await Promise.all(names.map((name) => optionalJson(path("admin/v2/namespaces", name))));
    return names.map((name, i) => ({ name, namespaces: namespaces[i] }));
  }, ["Tenant", "Namespaces"], (item) => [link(item.name, "tenant", item.name),
    item.namespaces === null ? "(not allowed)" : count(item.namespaces.length)]);
}

export function namespaces([tenant]) {
  return searchable(`Tenant ${tenant}`, "Search namespaces", async () => {
    const names = await json(path("admin/v2/namespaces", tenant));
    return names.map((full) => ({ name: full.slice(tenant.length + 1) }));
  }, ["Namespace"], (item) => [link(item.name, "namespace", tenant, item.name)]);
}

/** `persistent://t/ns/name` -> [domain, tenant, namespace, name]. */
export function topicParts(full) {
  const [domain, rest] = full.split("://");
  const [tenant, namespace, ...name] = rest.split("/");
  return [domain, tenant, namespace, name.join("/")];
}

export function topics([tenant, namespace]) {
  const list = searchable(`Namespace ${tenant}/${namespace}`, "Search topics", async () => {
    const names = await json(path("admin/v2/namespaces", tenant, namespace, "topics") + "?mode=ALL");
    return names.map((full) => {
      const [domain, , , name] = topicParts(full);
      return { name, domain };
    }).sort((a, b) => a.name.localeCompare(b.name));
  }, ["Topic", "Domain"], (item) => [link(item.name, "topic", item.domain, tenant, namespace, item.name), item.domain]);
  const policies = policyPanel(path("admin/v2/namespaces", tenant, namespace), { what: `namespace ${tenant}/${namespace}` });
  return { ...list, node: el("div", {}, list.node, policies.node),
    refresh: async () => { await Promise.all([list.refresh(), policies.refresh()]); } };
}
