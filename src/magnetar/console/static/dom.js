// Building the page: every name, property and payload goes in as a text node (append of a
// string) or an attribute value, never as markup.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/** A bookmarkable address inside the console: each part encoded, so a name is never a path or scheme. */
export function hashOf(...parts) {
  return "#/" + parts.map((part) => encodeURIComponent(part)).join("/");
}

export function link(text, ...parts) {
  return el("a", { href: hashOf(...parts) }, text);
}

export function table(headings, rows, empty = "none") {
  if (rows.length === 0) return el("p", { class: "empty" }, empty);
  return el("table", {},
    el("thead", {}, el("tr", {}, headings.map((heading) => el("th", {}, heading)))),
    el("tbody", {}, rows.map((row) => el("tr", {}, row.map((cell) => el("td", {}, cell))))));
}

export function facts(pairs) {
  return el("dl", { class: "facts" }, pairs.map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
}

export function searchBox(placeholder, onInput) {
  return el("input", { type: "search", class: "search", placeholder, "aria-label": placeholder,
    oninput: (event) => onInput(event.target.value.trim().toLowerCase()) });
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function bytes(value) {
  let amount = Number(value) || 0;
  let unit = 0;
  while (amount >= 1024 && unit < UNITS.length - 1) {
    amount /= 1024;
    unit++;
  }
  return `${unit === 0 ? Math.round(amount) : amount.toFixed(1)} ${UNITS[unit]}`;
}

export function rate(value, unit = "msg/s") {
  return `${(Number(value) || 0).toFixed(1)} ${unit}`;
}

export function count(value) {
  return (Number(value) || 0).toLocaleString("en");
}

/** `node`'s children replaced by `children`, those left out (null, undefined, false) skipped:
 * replaceChildren itself would show them as the words "null" and "undefined". */
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((child) => child !== null && child !== undefined && child !== false));
}
