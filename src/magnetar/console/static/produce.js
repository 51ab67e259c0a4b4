// A topic's produce form, for testing: one message (key, properties, payload) sent through
// Pulsar's REST producer (POST /topics/persistent/...), after the user confirms it. Where the
// topic has an AVRO or JSON schema, the payload is a JSON record, prefilled from the schema's
// fields, which the broker encodes and checks against the schema.

import { optionalJson, path, request } from "./api.js";
import { el } from "./dom.js";

const RECORD_TYPES = new Set(["AVRO", "JSON"]);

/** A field's starting value in the editor: what its Avro type's zero is. */
function zeroOf(type) {
  if (Array.isArray(type)) { // a union: its first branch other than null shows the value's shape
    const branch = type.find((t) => t !== "null");
    return branch === undefined ? null : zeroOf(branch);
  }
  const name = typeof type === "object" && type !== null ? type.type : type;
  switch (name) {
    case "int": case "long": case "float": case "double": return 0;
    case "boolean": return false;
    case "string": case "bytes": return "";
    case "array": return [];
    case "map": return {};
    case "record": return recordOf(type);
    case "enum": return type.symbols?.[0] ?? "";
    default: return null;
  }
}

function recordOf(definition) {
  return Object.fromEntries((definition?.fields ?? []).map((field) => [field.name, zeroOf(field.type)]));
}

/** The editor's first text for a schema (null: the topic has none, or it is not a record). */
export function template(schema) {
  if (schema === null || !RECORD_TYPES.has(schema.type)) return "";
  try {
    return JSON.stringify(recordOf(JSON.parse(schema.data)), null, 2);
  } catch {
    return "{}";
  }
}

/** `name=value` lines as an object of strings; a line without `=` is an error naming it. */
export function propertiesOf(text) {
  const properties = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter((l) => l !== "")) {
    const at = line.indexOf("=");
    if (at <= 0) throw new Error(`a property is name=value, not "${line}"`);
    properties[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return properties;
}

export function produceForm(tenant, namespace, topic) {
  const full = `persistent://${tenant}/${namespace}/${topic}`;
  const key = el("input", { type: "text", "aria-label": "Message key" });
  const properties = el("textarea", { rows: 2, "aria-label": "Message properties", placeholder: "name=value, one a line" });
  const payload = el("textarea", { rows: 6, "aria-label": "Message payload", spellcheck: "false" });
  const hint = el("p", { class: "hint", "data-testid": "produce-schema" });
  const outcome = el("p", { class: "outcome", role: "status", "data-testid": "produce-outcome" });
  let schema;

  async function send(event) {
    event.preventDefault();
    try {
      const message = { payload: payload.value, properties: propertiesOf(properties.value) };
      if (key.value !== "") message.key = key.value;
      if (schema !== null && RECORD_TYPES.has(schema.type)) message.payload = JSON.parse(payload.value);
      if (!window.confirm(`Publish this message to ${full}?`)) return;
      const answer = await (await request(path("topics/persistent", tenant, namespace, topic), "POST",
        { messages: [message] })).json();
      outcome.textContent = `published as ${answer.messagePublishResults[0].messageId}`;
    } catch (error) {
      outcome.textContent = `refused: ${error.message}`;
    }
  }

  async function refresh() {
    if (schema !== undefined) return; // read once: the editor keeps what the user typed
    schema = await optionalJson(path("admin/v2/schemas", tenant, namespace, topic, "schema")).catch(() => null);
    hint.textContent = schema === null ? "No schema: the payload is sent as text."
      : RECORD_TYPES.has(schema.type) ? `Schema ${schema.type} (version ${schema.version}): the payload is a JSON record.`
        : `Schema ${schema.type}: the payload is sent as text.`;
    payload.value = template(schema);
  }

  const node = el("form", { class: "produce", "data-testid": "produce", onsubmit: send },
    el("h2", {}, "Produce a message"), hint,
    el("label", {}, "Key ", key), el("label", {}, "Properties ", properties), el("label", {}, "Payload ", payload),
    el("p", { class: "actions" }, el("button", { type: "submit" }, "Publish…")), outcome);
  return { node, refresh };
}
