// The admin API as the console asks it: paths relative to the page (so a proxy may serve the
// console under a prefix), each user-named part encoded, the signed-in token (kept for this
// tab only, in sessionStorage) sent as a bearer token, errors as Pulsar's {"reason": ...}.

const TOKEN = "magnetar.console.token";

export class AuthRequired extends Error {}

export class ApiError extends Error {
  constructor(status, reason) {
    super(`${status}: ${reason}`);
    this.status = status;
  }
}

export function signedIn() {
  return sessionStorage.getItem(TOKEN) !== null;
}

/** Paths the admin API refused (403) to the role signed in: not asked again until it changes. */
const refused = new Set();

export function signIn(token) {
  sessionStorage.setItem(TOKEN, token);
  refused.clear();
}

export function signOut() {
  sessionStorage.removeItem(TOKEN);
  refused.clear();
}

/** `admin/v2/...` from fixed words and user-named parts (encoded). */
export function path(...parts) {
  return parts.map((part, i) => (i === 0 ? part : encodeURIComponent(part))).join("/");
}

async function reason(response) {
  const text = await response.text();
  try {
    return JSON.parse(text).reason ?? text;
  } catch {
    return text || response.statusText;
  }
}

/** One admin API call; `body`, when given, is sent as JSON (a policy's value, a message id). */
export async function request(url, method = "GET", body = undefined) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN);
  if (token !== null) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, { method, headers, cache: "no-store", credentials: "omit",
    body: body === undefined ? undefined : JSON.stringify(body) });
  if (response.status === 401) throw new AuthRequired(await reason(response));
  if (!response.ok) throw new ApiError(response.status, await reason(response));
  return response;
}

/** Characters of answers read since `takeReceived` last ran: what a refresh cost the broker to write. */
let received = 0;

export function takeReceived() {
  const taken = received;
  received = 0;
  return taken;
}

export async function text(url) {
  const body = await (await request(url)).text();
  received += body.length;
  return body;
}

export async function json(url) {
  return JSON.parse(await text(url));
}

/** What a role may not read (403) is null: the view says so, and the broker's log gets one refusal, not one a refresh. */
export async function optionalJson(url) {
  if (refused.has(url)) return null;
  try {
    return await json(url);
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 403) throw error;
    refused.add(url);
    return null;
  }
}

/** The sums of /metrics' samples by metric name (every label set added up). */
export function metricSums(exposition) {
  const sums = new Map();
  for (const line of exposition.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const nameEnd = line.search(/[{ ]/);
    const value = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (nameEnd <= 0 || !Number.isFinite(value)) continue;
    const name = line.slice(0, nameEnd);
    sums.set(name, (sums.get(name) ?? 0) + value);
  }
  return sums;
}

/** The samples of `name` in /metrics' text: [{labels: {name: value}, value}] (other metrics skipped unparsed). */
export function metricSamples(exposition, name) {
  const samples = [];
  for (const line of exposition.split("\n")) {
    if (!line.startsWith(`${name}{`)) continue;
    const end = line.lastIndexOf("}");
    const labels = {};
    for (const [, key, value] of line.slice(name.length + 1, end).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[key] = value.replace(/\\(.)/g, (_, char) => (char === "n" ? "\n" : char));
    }
    samples.push({ labels, value: Number(line.slice(end + 1).trim()) });
  }
  return samples;
}

/** Each tenant's namespaces, each namespace's topics (persistent and not); null when the role may not list tenants. */
export async function walk() {
  const tenants = await optionalJson("admin/v2/tenants");
  if (tenants === null) return null;
  const namespaces = (await Promise.all(tenants.map((tenant) => json(path("admin/v2/namespaces", tenant))))).flat();
  const topics = await Promise.all(namespaces.map((namespace) => {
    const [tenant, name] = namespace.split("/");
    return json(path("admin/v2/namespaces", tenant, name, "topics") + "?mode=ALL");
  }));
  return { tenants, namespaces, topics: topics.flat() };
}
