// The message browser: the latest N entries of a topic (examinemessage), or the first N of a
// subscription's backlog (peek), read without acknowledging anything; a batched entry is
// split into its messages here (batch.js). Payloads show as text when they are UTF-8, else
// as hex; either way as text nodes.

import { ApiError, json, path, request } from "./api.js";
import { splitBatch } from "./batch.js";
import { decode } from "./decode.js";
import { bytes, el, facts, hashOf, table } from "./dom.js";

export const MAX_ENTRIES = 100;
const SHOWN_BYTES = 4096;
const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });
const UTF8 = new TextDecoder("utf-8");

/** A header as the broker wrote it: fetch gives its bytes as Latin-1 characters. */
function headerText(value) {
  return value === null ? null : UTF8.decode(Uint8Array.from(value, (char) => char.charCodeAt(0) & 0xff));
}

function time(millis) {
  return millis ? new Date(millis).toISOString() : null;
}

async function readEntry(url) {
  let response;
  try {
    response = await request(url);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null; // past the last entry
    throw error;
  }
  const data = new Uint8Array(await response.arrayBuffer());
  const header = (name) => headerText(response.headers.get(name));
  const entry = {
    id: header("x-pulsar-message-id"),
    publishTime: header("x-pulsar-publish-time"),
    producer: header("x-pulsar-producer-name"),
    brokerTime: header("x-pulsar-broker-entry-metadata-timestamp"),
    index: header("x-pulsar-broker-entry-metadata-index"),
  };
  const batched = header("x-pulsar-num-batch-message");
  if (batched !== null) {
    // PIP-70's index is the entry's last message's: each message's counts back from it
    const last = entry.index === null ? null : Number(entry.index);
    const messages = splitBatch(data, Number(batched));
    return messages.map((message, i) => ({
      ...entry, ...message, id: `${entry.id}:${i}`, eventTime: time(message.eventTime),
      index: last === null ? null : String(last - (messages.length - 1) + i),
    }));
  }
  const properties = [];
  for (const [name, value] of response.headers) {
    if (name.startsWith("x-pulsar-property-")) properties.push([headerText(name.slice(18)), headerText(value)]);
  }
  return [{ ...entry, key: header("x-pulsar-partition-key"), eventTime: header("x-pulsar-event-time"), properties,
    sequenceId: header("x-pulsar-sequence-id"), payload: data }];
}

function hex(data) {
  const lines = [];
  for (let at = 0; at < Math.min(data.length, SHOWN_BYTES); at += 16) {
    const row = Array.from(data.subarray(at, at + 16), (byte) => byte.toString(16).padStart(2, "0"));
    lines.push(`${at.toString(16).padStart(6, "0")}  ${row.join(" ")}`);
  }
  return lines.join("\n");
}

function payloadText(data, mode, versions) {
  if (mode === "schema") {
    const decoded = decode(versions, data);
    if (decoded !== null) return { text: decoded.text, shown: `${decoded.type} (schema version ${decoded.version})` };
  }
  if (mode !== "hex") {
    try {
      return { text: STRICT_UTF8.decode(data.subarray(0, SHOWN_BYTES)), shown: "text" };
    } catch {
      // not UTF-8 (or cut inside a character): hex below
    }
  }
  return { text: hex(data), shown: "hex" };
}

function card(message, mode, versions) {
  const { text, shown } = payloadText(message.payload, mode, versions);
  const more = message.payload.length > SHOWN_BYTES ? ` (first ${bytes(SHOWN_BYTES)} shown)` : "";
  return el("article", { class: "message", "data-testid": "message" },
    facts([
      ["Message id", message.id],
      ["Key", message.key ?? "(none)"],
      ["Publish time", message.publishTime],
      ["Event time", message.eventTime ?? "(none)"],
      ["Broker time", message.brokerTime ?? "(none)"],
      ["Index", message.index ?? "(none)"],
      ["Producer", message.producer],
    ]),
    message.properties.length ? table(["Property", "Value"], message.properties) : null,
    el("p", { class: "payload-label" }, `Payload, ${bytes(message.payload.length)} as ${shown}${more}`),
    el("pre", { class: "payload", "data-testid": "payload" }, text));
}

/** Where a read starts, from the address: `index:N` (PIP-70) or `time:MILLIS` (broker time); null: not given. */
export function startOf(from) {
  const found = /^(index|time):(\d{1,16})$/.exec(from);
  return found === null ? null : { kind: found[1], at: Number(found[2]) };
}

/** What the user typed in "at" as the address says it: an index, or a time (ISO or milliseconds). */
function typedStart(kind, typed) {
  const text = typed.trim();
  if (kind === "index") return /^\d{1,16}$/.test(text) ? `index:${text}` : null;
  const millis = /^\d{1,16}$/.test(text) ? Number(text) : Date.parse(text);
  return Number.isFinite(millis) && millis >= 0 ? `time:${millis}` : null;
}

export function messages([domain, tenant, namespace, name, wanted = "10", subscription = "", from = ""]) {
  const count = Math.min(MAX_ENTRIES, Math.max(1, Number.parseInt(wanted, 10) || 10));
  const start = startOf(from);
  let mode = null; // the schema's when the topic has one, else text
  let shown = [];
  let versions = null; // the topic's schema versions, newest first
  const list = el("div", { class: "messages" });
  const draw = () => list.replaceChildren(...(shown.length ? shown.map((m) => card(m, mode, versions))
    : [el("p", { class: "empty" }, "no messages")]));
  const amount = el("input", { type: "number", min: 1, max: MAX_ENTRIES, value: count, "aria-label": "How many" });
  const source = el("select", { "aria-label": "From" }, el("option", { value: "latest:" }, "the topic's latest entries"));
  const at = el("input", { type: "text", size: 24, "aria-label": "At", placeholder: "index, or time (ISO)",
    value: start === null ? "" : start.kind === "index" ? String(start.at) : new Date(start.at).toISOString() });
  const format = el("select", { "aria-label": "Show payloads as", onchange: () => { mode = format.value; draw(); } },
    el("option", { value: "schema" }, "decoded by the topic's schema"),
    el("option", { value: "text" }, "text (hex when not UTF-8)"), el("option", { value: "hex" }, "hex"));
  const show = el("button", { type: "button", onclick: () => {
    const [kind, chosen] = [source.value.slice(0, source.value.indexOf(":")), source.value.slice(source.value.indexOf(":") + 1)];
    const begin = kind === "index" || kind === "time" ? typedStart(kind, at.value) : "";
    if (begin === null) {
      list.replaceChildren(el("p", { class: "empty" }, kind === "index" ? "an index is a whole number"
        : "a time is ISO-8601 (2026-01-31T12:00:00Z) or milliseconds since 1970"));
      return;
    }
    const parts = ["messages", domain, tenant, namespace, name, amount.value, kind === "sub" ? chosen : ""];
    const address = hashOf(...(begin ? [...parts, begin] : parts));
    if (location.hash === address) window.dispatchEvent(new HashChangeEvent("hashchange")); // the same: read again
    else location.hash = address;
  } }, "Show");
  const topicUrl = (...rest) => path("admin/v2/persistent", tenant, namespace, name, ...rest);

  async function schemaVersions() {
    try {
      const answer = await json(path("admin/v2/schemas", tenant, namespace, name, "schemas"));
      return [...answer.getSchemaResponses].sort((a, b) => b.version - a.version);
    } catch (error) {
      if (error instanceof ApiError && (error.status === 404 || error.status === 403)) return [];
      throw error;
    }
  }

  /** `count` entries from the one holding the start (oldest first), ledger after ledger; the
   * messages of the first entry before an index are left out. */
  async function readFrom({ kind, at: value }) {
    let found;
    try {
      found = await json(kind === "index" ? `${topicUrl("getMessageIdByIndex")}?index=${value}` : topicUrl("messageid", String(value)));
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return [];
      throw error;
    }
    const ledgers = (await json(topicUrl("internalStats"))).ledgers.map((ledger) => ledger.ledgerId);
    let ledger = ledgers.indexOf(found.ledgerId);
    let entry = found.entryId;
    const entries = [];
    while (entries.length < count && ledger >= 0 && ledger < ledgers.length) {
      const read = await readEntry(topicUrl("ledger", String(ledgers[ledger]), "entry", String(entry)));
      if (read === null) { // past the ledger's last entry: the next ledger's first
        ledger++;
        entry = 0;
        continue;
      }
      entries.push(read);
      entry++;
    }
    return entries.flat().filter((message) => kind !== "index" || message.index === null || Number(message.index) >= value);
  }

  async function refresh() {
    versions ??= await schemaVersions();
    if (mode === null) {
      mode = versions.length ? "schema" : "text";
      format.value = mode;
    }
    const stats = await json(topicUrl("stats"));
    source.replaceChildren(el("option", { value: "latest:" }, "the topic's latest entries"),
      el("option", { value: "index:" }, "a PIP-70 index (at)"), el("option", { value: "time:" }, "a broker time (at)"),
      ...Object.keys(stats.subscriptions ?? {}).sort().map((sub) => el("option", { value: `sub:${sub}` },
        `the backlog of subscription ${sub}`)));
    source.value = start !== null ? `${start.kind}:` : subscription ? `sub:${subscription}` : "latest:";
    if (start !== null) {
      shown = await readFrom(start);
    } else {
      const urls = Array.from({ length: count }, (_, i) => (subscription
        ? topicUrl("subscription", subscription, "position", String(i + 1))
        : topicUrl("examinemessage") + `?initialPosition=latest&messagePosition=${i + 1}`));
      const entries = await Promise.all(urls.map(readEntry));
      // newest first from the topic's end; a backlog from its oldest message
      shown = entries.filter((entry) => entry !== null).flatMap((entry) => (subscription ? entry : entry.reverse()));
    }
    draw();
  }
  const node = el("section", {},
    el("form", { class: "controls", onsubmit: (event) => { event.preventDefault(); show.click(); } },
      el("label", {}, "Entries ", amount), el("label", {}, "from ", source), el("label", {}, "at ", at),
      el("label", {}, "as ", format), show),
    list);
  return { title: `Messages of ${domain}://${tenant}/${namespace}/${name}`, node, refresh, manual: true };
}
