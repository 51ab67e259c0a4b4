// A topic: its rates and storage, producers, subscriptions (Kafka consumer groups are
// subscriptions, so they are listed here too) and consumers; a partitioned topic lists its
// partitions with their figures summed.

import { json, optionalJson, path, request } from "./api.js";
import { lineChart } from "./chart.js";
import { bytes, count, el, facts, fill, hashOf, link, rate, table } from "./dom.js";
import { policyPanel } from "./policies.js";
import { produceForm } from "./produce.js";
import { schemas } from "./schemas.js";

function topicPath(domain, tenant, namespace, topic, ...rest) {
  return path(`admin/v2/${domain === "non-persistent" ? "non-persistent" : "persistent"}`, tenant, namespace, topic,
    ...rest);
}

function traffic(stats) {
  return [
    ["Rate in", `${rate(stats.msgRateIn)} (${bytes(stats.msgThroughputIn)}/s)`],
    ["Rate out", `${rate(stats.msgRateOut)} (${bytes(stats.msgThroughputOut)}/s)`],
    ["Messages in / out", `${count(stats.msgInCounter)} / ${count(stats.msgOutCounter)}`],
  ];
}

const HISTORY = 60; // samples in the chart: three minutes at a refresh every 3 s

/** Messages per second in and out since the last refresh, from the topic's counters (its own
 * rates move once a statsUpdateFrequencyInSecs, a minute by default), kept for the chart. */
function rateHistory() {
  const history = { times: [], in: [], out: [] };
  let last = null;
  return (stats) => {
    const now = Date.now();
    const counters = [stats.msgInCounter ?? 0, stats.msgOutCounter ?? 0];
    if (last !== null && now > last.time) {
      const seconds = (now - last.time) / 1000;
      // an unloaded topic restarts its counters: never a negative rate
      const [inRate, outRate] = counters.map((value, i) => Math.max(0, value - last.counters[i]) / seconds);
      history.times = [...history.times, now / 1000].slice(-HISTORY);
      history.in = [...history.in, inRate].slice(-HISTORY);
      history.out = [...history.out, outRate].slice(-HISTORY);
    }
    last = { time: now, counters };
    return lineChart(history.times, [{ label: "in", values: history.in, cls: "in" },
      { label: "out", values: history.out, cls: "out" }]);
  };
}

function producers(stats) {
  return table(["Producer", "Address", "Access mode", "Rate in"], (stats.publishers ?? []).map((p) => [
    p.producerName, p.address ?? "", p.accessMode ?? "", rate(p.msgRateIn)]), "no producers");
}

/** A message id typed as `ledger:entry` (as the message browser shows it; a batch index after it is
 * ignored: a reset goes to the entry) as Pulsar's MessageIdImpl JSON; null when it is not one. */
export function messageId(typed) {
  const found = /^\s*(\d+):(\d+)(?::\d+)?\s*$/.exec(typed ?? "");
  return found === null ? null : { ledgerId: Number(found[1]), entryId: Number(found[2]) };
}

/** Where "Reset…" goes: a number is minutes ago, anything else a date as Date.parse reads it
 * (`2026-11-28T08:00:00Z`; without an offset, the browser's time zone); null: neither. */
export function resetTime(typed) {
  const text = typed.trim();
  if (/^\d+(\.\d+)?$/.test(text)) {
    return { millis: Math.round(Date.now() - Number(text) * 60_000), since: `in the last ${Number(text)} minutes` };
  }
  const millis = Date.parse(text);
  return Number.isNaN(millis) || millis < 0 ? null : { millis, since: `since ${new Date(millis).toISOString()}` };
}

/** A subscription's actions, each an admin API call after the user confirms it; `done` redraws.
 * `ask` gets what the call needs (a prompt, a look-up) and answers the call or null (cancelled). */
function actions(subscriptionUrl, indexUrl, name, done) {
  const act = (label, question, ask) => el("button", { type: "button", onclick: async () => {
    try {
      const call = await ask();
      if (call === null || !window.confirm(question(call))) return;
      await request(subscriptionUrl(name, ...call.path), call.method ?? "POST", call.body);
      done(null);
    } catch (error) {
      done(error);
    }
  } }, label);
  const asked = (question, fallback) => window.prompt(question, fallback) ?? "";
  return el("span", { class: "actions" },
    act("Clear backlog", () => `Acknowledge every message of subscription ${name}?`, () => ({ path: ["skip_all"] })),
    act("Skip…", (call) => `Acknowledge the next ${call.path[1]} messages of subscription ${name}?`, () => {
      const skipped = Number.parseInt(asked(`Skip how many messages of subscription ${name}?`, "1"), 10);
      return skipped > 0 ? { path: ["skip", String(skipped)] } : null;
    }),
    act("Reset…", (call) => `Move subscription ${name} back to what was published ${call.since}?`, () => {
      const at = resetTime(asked(`Reset subscription ${name} to how many minutes ago, or to a date (ISO 8601)?`, "60"));
      return at === null ? null : { since: at.since, path: ["resetcursor", String(at.millis)] };
    }),
    act("Reset to id…", (call) => `Move subscription ${name} to message ${call.body.ledgerId}:${call.body.entryId}?`, () => {
      const body = messageId(asked(`Reset subscription ${name} to which message id (ledger:entry)?`, ""));
      return body === null ? null : { path: ["resetcursor"], body };
    }),
    indexUrl === null ? null : act("Reset to index…",
      (call) => `Move subscription ${name} to index ${call.index} (message ${call.body.ledgerId}:${call.body.entryId})?`,
      async () => {
        const index = asked(`Reset subscription ${name} to which PIP-70 index?`, "0").trim();
        if (!/^\d+$/.test(index)) return null;
        const found = await json(`${indexUrl}?index=${index}`);
        return { index, path: ["resetcursor"], body: { ledgerId: found.ledgerId, entryId: found.entryId } };
      }),
    act("Delete…", () => `Delete subscription ${name} and its backlog?`, () => ({ path: [], method: "DELETE" })));
}

function subscriptions(stats, subscriptionUrl, indexUrl, done) {
  const entries = Object.entries(stats.subscriptions ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return [
    table(["Subscription", "Type", "Backlog", "Unacked", "Rate out", "Consumers", "Actions"], entries.map(([name, s]) => [
      name, s.type ?? "", count(s.msgBacklog), count(s.unackedMessages), rate(s.msgRateOut),
      count((s.consumers ?? []).length), subscriptionUrl === null ? "" : actions(subscriptionUrl, indexUrl, name, done)]),
    "no subscriptions"),
    el("h3", {}, "Consumers"),
    table(["Subscription", "Consumer", "Address", "Rate out", "Unacked"], entries.flatMap(([name, s]) =>
      (s.consumers ?? []).map((c) => [name, c.consumerName, c.address ?? "", rate(c.msgRateOut),
        count(c.unackedMessages)])), "no consumers"),
  ];
}

/** Compaction's state as Pulsar's LongRunningProcessStatus says it, with its last error. */
function compaction(status) {
  if (status === null) return "(not allowed to read)";
  return status.lastError ? `${status.status}: ${status.lastError}` : status.status;
}

export function topic([domain, tenant, namespace, name]) {
  const body = el("div");
  const outcome = el("p", { class: "outcome", role: "status" });
  const url = (...rest) => topicPath(domain, tenant, namespace, name, ...rest);
  const persistent = domain === "persistent";
  const subscriptionUrl = persistent ? (subscription, ...rest) => url("subscription", subscription, ...rest) : null;
  const indexUrl = persistent ? url("getMessageIdByIndex") : null;
  const full = `${domain}://${tenant}/${namespace}/${name}`;
  const policies = persistent ? policyPanel(url(), { isTopic: true, what: full }) : null;
  const schema = persistent ? schemas(tenant, namespace, name) : null;
  const produce = persistent ? produceForm(tenant, namespace, name) : null;
  const chart = rateHistory();
  let partitioned = false;
  let reads = 0; // a refresh an action started may overtake the periodic one: the later read is drawn
  const done = (error) => {
    outcome.textContent = error === null ? "done" : `refused: ${error.message}`;
    refresh().catch((failure) => { outcome.textContent = `error: ${failure.message}`; });
  };
  const remove = el("button", { type: "button", class: "danger", onclick: async () => {
    if (!window.confirm(`Delete topic ${full} and all its messages?`)) return;
    try {
      await request(partitioned ? url("partitions") : url(), "DELETE");
      location.hash = hashOf("namespace", tenant, namespace);
    } catch (error) {
      outcome.textContent = `refused: ${error.message}`;
    }
  } }, "Delete topic…");

  async function refresh() {
    const mine = ++reads;
    const { partitions } = await json(url("partitions"));
    partitioned = partitions > 0;
    if (partitioned) {
      const stats = await json(url("partitioned-stats"));
      if (mine !== reads) return;
      body.replaceChildren(facts([["Partitions", count(partitions)], ...traffic(stats)]),
        el("h2", {}, "Messages per second"), chart(stats),
        el("h2", {}, "Partitions"),
        table(["Partition"], Array.from({ length: partitions }, (_, i) => [
          link(`${name}-partition-${i}`, "topic", domain, tenant, namespace, `${name}-partition-${i}`)])),
        el("h2", {}, "Producers"), producers(stats));
    } else {
      const [stats, compacted] = await Promise.all([json(url("stats")), persistent ? optionalJson(url("compaction")) : null]);
      if (mine !== reads) return;
      fill(body,
        facts([...traffic(stats), ["Storage", bytes(stats.storageSize ?? 0)], ["Backlog", bytes(stats.backlogSize ?? 0)],
          ...(persistent ? [["Compaction", compaction(compacted)]] : [])]),
        el("h2", {}, "Messages per second"), chart(stats),
        persistent ? el("p", {}, link("Browse messages", "messages", domain, tenant, namespace, name)) : null,
        el("h2", {}, "Producers"), producers(stats),
        el("h2", {}, "Subscriptions"), ...subscriptions(stats, subscriptionUrl, indexUrl, done));
    }
    await Promise.all([policies?.refresh(), schema?.refresh(), produce?.refresh()]);
  }
  return { title: `Topic ${full}`, node: el("div", {}, outcome, body, produce?.node, schema?.node, policies?.node,
    el("p", { class: "actions" }, remove)), refresh };
}
