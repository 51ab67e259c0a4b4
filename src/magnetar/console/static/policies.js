// A namespace's or a topic's policies (retention, message TTL, backlog quotas, compaction
// threshold, schema compatibility), each read from and written to its admin API path, so the
// role table holds: a role that may not read one sees so, a role that may not change one gets
// the admin API's refusal shown as text. Read when the view opens and after each change, not
// on every refresh: a refresh would wipe what the user is typing.

import { ApiError, json, request } from "./api.js";
import { el, table } from "./dom.js";

export const STRATEGIES = ["UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
  "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"];
const QUOTA_POLICIES = ["producer_request_hold", "producer_exception", "consumer_backlog_eviction"];
const REFUSED = Symbol("refused");

/** A whole number typed in a field; anything else goes as typed, for the admin API to refuse with its reason. */
const integer = (typed) => (/^\s*-?\d+\s*$/.test(typed) ? Number(typed) : typed);

/** Each policy: the path it is read from, its fields, its value as the fields show it (null:
 * not set), and the call setting it from what was typed ([path, JSON body or undefined]). */
function policies(base, isTopic) {
  const quota = (type, name, limit, unit) => ({
    name, read: "backlogQuotaMap", fields: [{ label: unit }, { label: "when reached", options: QUOTA_POLICIES }],
    values: (map) => (map?.[type] ? [map[type][limit], map[type].policy] : null),
    set: ([amount, policy]) => [`backlogQuota?backlogQuotaType=${type}`,
      { limitSize: -1, limitTime: -1, [limit]: integer(amount), policy }],
    remove: `backlogQuota?backlogQuotaType=${type}`,
  });
  const scalar = (name, read, label, options) => ({
    name, read, fields: [{ label, options }], values: (value) => (value === null ? null : [value]),
    set: ([value]) => [read, options ? value : integer(value)], remove: read,
  });
  return [
    { name: "Retention", read: "retention", fields: [{ label: "minutes" }, { label: "MB" }],
      values: (value) => (value === null ? null : [value.retentionTimeInMinutes, value.retentionSizeInMB]),
      set: ([minutes, size]) => ["retention", { retentionTimeInMinutes: integer(minutes), retentionSizeInMB: integer(size) }],
      remove: "retention" },
    // a topic's TTL is set by a query parameter (Pulsar's path), a namespace's by the body
    { ...scalar("Message TTL", "messageTTL", "seconds"),
      set: ([seconds]) => (isTopic ? [`messageTTL?messageTTL=${encodeURIComponent(seconds.trim())}`, undefined]
        : ["messageTTL", integer(seconds)]) },
    quota("destination_storage", "Backlog quota (size)", "limitSize", "bytes"),
    quota("message_age", "Backlog quota (age)", "limitTime", "seconds"),
    scalar("Compaction threshold", "compactionThreshold", "bytes"),
    scalar("Schema compatibility", "schemaCompatibilityStrategy", "strategy", STRATEGIES),
  ];
}

async function readOrRefused(url) {
  try {
    return await json(url);
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) return REFUSED;
    throw error;
  }
}

function shown(policy, values) {
  if (values === REFUSED) return "(not allowed to read)";
  if (values === null) return "(not set)";
  return values.map((value, i) => `${value} ${policy.fields[i].options ? "" : policy.fields[i].label}`.trim()).join(", ");
}

/** The policies of `base` (an admin API path of a namespace or topic) as a table with an editor a row. */
export function policyPanel(base, { isTopic = false, what = base } = {}) {
  const rows = policies(base, isTopic);
  const outcome = el("p", { class: "outcome", role: "status", "data-testid": "policy-outcome" });
  const body = el("div");
  let loaded = false;

  /** The outcome is said once the table shows what the call changed. */
  const act = async (label, call) => {
    outcome.textContent = `${label}: …`;
    let said = `${label}: done`;
    try {
      await call();
    } catch (error) {
      said = `${label}: refused: ${error.message}`;
    }
    try {
      await load();
    } finally {
      outcome.textContent = said;
    }
  };

  function editor(policy, values) {
    if (values === REFUSED) return "";
    const inputs = policy.fields.map((field, i) => {
      const current = values === null ? "" : String(values[i]);
      const name = `${policy.name} ${field.label}`;
      if (!field.options) return el("input", { type: "text", inputmode: "numeric", size: 10, value: current, "aria-label": name });
      const select = el("select", { "aria-label": name }, field.options.map((option) => el("option", { value: option }, option)));
      select.value = current || field.options[0];
      return select;
    });
    return el("form", { class: "policy-edit", onsubmit: (event) => {
      event.preventDefault();
      const [suffix, value] = policy.set(inputs.map((input) => input.value));
      act(policy.name, () => request(`${base}/${suffix}`, "POST", value));
    } }, policy.fields.map((field, i) => el("label", {}, inputs[i], field.options ? "" : ` ${field.label}`)),
    el("button", { type: "submit" }, "Save"),
    values === null ? null : el("button", { type: "button", onclick: () => {
      if (!window.confirm(`Remove the ${policy.name.toLowerCase()} policy of ${what}?`)) return;
      act(policy.name, () => request(`${base}/${policy.remove}`, "DELETE"));
    } }, "Remove"));
  }

  async function load() {
    const reads = new Map(rows.map((policy) => [policy.read, null]));
    await Promise.all([...reads.keys()].map(async (read) => reads.set(read, await readOrRefused(`${base}/${read}`))));
    body.replaceChildren(table(["Policy", "Value", "Change"], rows.map((policy) => {
      const answer = reads.get(policy.read);
      const values = answer === REFUSED ? REFUSED : policy.values(answer);
      return [policy.name, shown(policy, values), editor(policy, values)];
    })));
  }

  /** The first refresh reads them; later ones leave the editors alone. */
  async function refresh() {
    if (loaded) return;
    await load();
    loaded = true;
  }
  return { node: el("section", { "data-testid": "policies" }, el("h2", {}, "Policies"), outcome, body), refresh };
}
