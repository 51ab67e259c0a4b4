// A topic: its rates and storage, producers, subscriptions (Kafka consumer groups are
// subscriptions, so they are listed here too) and consumers; a partitioned topic lists its
// partitions with their figures summed.

import { json, path, request } from "./api.js";
import { bytes, count, el, facts, link, rate, table } from "./dom.js";

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

function producers(stats) {
  return table(["Producer", "Address", "Access mode", "Rate in"], (stats.publishers ?? []).map((p) => [
    p.producerName, p.address ?? "", p.accessMode ?? "", rate(p.msgRateIn)]), "no producers");
}

/** A subscription's actions, each an admin API call after the user confirms it; `done` redraws. */
function actions(subscriptionUrl, name, done) {
  const act = (label, question, ask) => el("button", { type: "button", onclick: async () => {
    const suffix = ask();
    if (suffix === null || !window.confirm(question())) return;
    try {
      await request(subscriptionUrl(name, ...suffix), "POST");
      done(null);
    } catch (error) {
      done(error);
    }
  } }, label);
  let skipped = null;
  let minutes = null;
  return el("span", { class: "actions" },
    act("Clear backlog", () => `Acknowledge every message of subscription ${name}?`, () => ["skip_all"]),
    act("Skip…", () => `Acknowledge the next ${skipped} messages of subscription ${name}?`, () => {
      skipped = Number.parseInt(window.prompt(`Skip how many messages of subscription ${name}?`, "1") ?? "", 10);
      return skipped > 0 ? ["skip", String(skipped)] : null;
    }),
    act("Reset…", () => `Move subscription ${name} back to what was published in the last ${minutes} minutes?`, () => {
      minutes = Number.parseFloat(window.prompt(`Reset subscription ${name} to how many minutes ago?`, "60") ?? "");
      return minutes >= 0 ? ["resetcursor", String(Math.round(Date.now() - minutes * 60_000))] : null;
    }));
}

function subscriptions(stats, subscriptionUrl, done) {
  const entries = Object.entries(stats.subscriptions ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return [
    table(["Subscription", "Type", "Backlog", "Unacked", "Rate out", "Consumers", "Actions"], entries.map(([name, s]) => [
      name, s.type ?? "", count(s.msgBacklog), count(s.unackedMessages), rate(s.msgRateOut),
      count((s.consumers ?? []).length), subscriptionUrl === null ? "" : actions(subscriptionUrl, name, done)]),
    "no subscriptions"),
    el("h3", {}, "Consumers"),
    table(["Subscription", "Consumer", "Address", "Rate out", "Unacked"], entries.flatMap(([name, s]) =>
      (s.consumers ?? []).map((c) => [name, c.consumerName, c.address ?? "", rate(c.msgRateOut),
        count(c.unackedMessages)])), "no consumers"),
  ];
}

export function topic([domain, tenant, namespace, name]) {
  const body = el("div");
  const outcome = el("p", { class: "outcome", role: "status" });
  const subscriptionUrl = domain === "persistent"
    ? (subscription, ...rest) => topicPath(domain, tenant, namespace, name, "subscription", subscription, ...rest)
    : null;
  const done = (error) => {
    outcome.textContent = error === null ? "done" : `refused: ${error.message}`;
    refresh().catch((failure) => { outcome.textContent = `error: ${failure.message}`; });
  };
  async function refresh() {
    const { partitions } = await json(topicPath(domain, tenant, namespace, name, "partitions"));
    if (partitions > 0) {
      const stats = await json(topicPath(domain, tenant, namespace, name, "partitioned-stats"));
      body.replaceChildren(facts([["Partitions", count(partitions)], ...traffic(stats)]),
        el("h2", {}, "Partitions"),
        table(["Partition"], Array.from({ length: partitions }, (_, i) => [
          link(`${name}-partition-${i}`, "topic", domain, tenant, namespace, `${name}-partition-${i}`)])),
        el("h2", {}, "Producers"), producers(stats));
      return;
    }
    const stats = await json(topicPath(domain, tenant, namespace, name, "stats"));
    body.replaceChildren(
      facts([...traffic(stats), ["Storage", bytes(stats.storageSize ?? 0)], ["Backlog", bytes(stats.backlogSize ?? 0)]]),
      domain === "persistent" ? el("p", {}, link("Browse messages", "messages", domain, tenant, namespace, name)) : null,
      el("h2", {}, "Producers"), producers(stats),
      el("h2", {}, "Subscriptions"), ...subscriptions(stats, subscriptionUrl, done));
  }
  return { title: `Topic ${domain}://${tenant}/${namespace}/${name}`, node: el("div", {}, outcome, body), refresh };
}
