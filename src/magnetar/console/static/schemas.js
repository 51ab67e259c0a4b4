// A topic's schema versions (`/admin/v2/schemas/.../schemas`) and a line diff between two of
// them, worked out in the browser: the broker only lists them. Read when the view opens, not
// on every refresh (versions change rarely and a refresh would reset the chosen pair).

import { ApiError, optionalJson, path } from "./api.js";
import { el, table } from "./dom.js";

/** Lines compared at most: the diff is quadratic in them, and a schema this long is read, not diffed. */
export const MAX_DIFF_LINES = 2000;

/** A schema's definition as lines: JSON (Avro, JSON schemas) pretty-printed, anything else as stored. */
export function definitionLines(schema) {
  try {
    return JSON.stringify(JSON.parse(schema.data), null, 2).split("\n");
  } catch {
    return String(schema.data ?? "").split("\n");
  }
}

/** The lines of `before` and `after` as [mark, line]: " " kept, "-" removed, "+" added (a longest common subsequence). */
export function lineDiff(before, after) {
  const n = before.length;
  const m = after.length;
  const common = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      common[i][j] = before[i] === after[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const lines = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && before[i] === after[j]) {
      lines.push([" ", before[i++]]);
      j++;
    } else if (j < m && (i === n || common[i][j + 1] >= common[i + 1][j])) {
      lines.push(["+", after[j++]]);
    } else {
      lines.push(["-", before[i++]]);
    }
  }
  return lines;
}

function properties(schema) {
  return Object.entries(schema.properties ?? {}).map(([name, value]) => `${name}=${value}`).join(", ");
}

export function schemas(tenant, namespace, topic) {
  const body = el("div");
  let loaded = false;

  function diffView(versions, from, to) {
    const [before, after] = [from, to].map((version) => definitionLines(versions.find((s) => String(s.version) === version)));
    if (before.length > MAX_DIFF_LINES || after.length > MAX_DIFF_LINES) {
      return el("p", { class: "empty" }, `too long to compare here (over ${MAX_DIFF_LINES} lines)`);
    }
    return el("pre", { class: "payload diff", "data-testid": "schema-diff" }, lineDiff(before, after).map(([mark, line]) =>
      el("span", { class: mark === "+" ? "added" : mark === "-" ? "removed" : "kept" }, `${mark} ${line}\n`)));
  }

  function draw(versions) {
    if (versions === null) {
      body.replaceChildren(el("p", { class: "empty" }, "(not allowed to read)"));
      return;
    }
    const choice = (label, selected) => {
      const select = el("select", { "aria-label": label }, versions.map((s) => el("option", { value: s.version }, `version ${s.version}`)));
      select.value = String(selected);
      return select;
    };
    if (versions.length === 0) {
      body.replaceChildren(el("p", { class: "empty" }, "no schema: producers send bytes"));
      return;
    }
    const rows = versions.map((s) => [String(s.version), s.type, new Date(s.timestamp).toISOString(), properties(s)]);
    const from = choice("Compare version", versions[Math.max(0, versions.length - 2)].version);
    const to = choice("with version", versions.at(-1).version);
    const shown = el("div");
    const compare = () => shown.replaceChildren(diffView(versions, from.value, to.value));
    from.addEventListener("change", compare);
    to.addEventListener("change", compare);
    body.replaceChildren(table(["Version", "Type", "Registered", "Properties"], rows),
      el("p", { class: "controls" }, el("label", {}, "Compare ", from), el("label", {}, " with ", to)), shown);
    compare();
  }

  async function refresh() {
    if (loaded) return;
    let answer;
    try {
      answer = await optionalJson(path("admin/v2/schemas", tenant, namespace, topic, "schemas"));
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 404) throw error;
      answer = { getSchemaResponses: [] }; // Pulsar's answer for a topic without a schema
    }
    draw(answer === null ? null : [...answer.getSchemaResponses].sort((a, b) => a.version - b.version));
    loaded = true;
  }
  return { node: el("section", { "data-testid": "schemas" }, el("h2", {}, "Schema"), body), refresh };
}
