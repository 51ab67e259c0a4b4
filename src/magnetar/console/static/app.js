// The console's shell: hash addresses to views, a refresh every few seconds while the tab is
// visible, and the token sign-in when the admin API asks for credentials.

import { AuthRequired, signIn, signOut, signedIn, takeReceived } from "./api.js";
import { el, link } from "./dom.js";
import { functionList, functionView } from "./functions.js";
import { messages } from "./messages.js";
import { topic } from "./topic.js";
import { namespaces, overview, tenants, topics } from "./views.js";

const REFRESH_MS = 3000;
/** A refresh waits at least this many times as long as the broker took to write what it read,
 * so that a console left open on a large broker (10,000 topics: a /metrics of 15 MB) keeps to
 * a few percent of its time; counted in bytes (the broker writes its admin answers at about
 * BYTES_PER_MS), so the pace does not depend on how loaded the browser's machine is. */
const SHARE = 50;
const BYTES_PER_MS = 30_000;
const VIEWS = { "": overview, tenants, tenant: namespaces, namespace: topics, topic, messages, functions: functionList,
  function: functionView };
const main = document.getElementById("view");
const status = document.getElementById("status");
const signInForm = document.getElementById("sign-in");
const signOutButton = document.getElementById("sign-out");
let current = null;
let busy = false;
let signedOut = false; // the admin API asked for a token: no polling until one is given
let timer = null;
let ticks = 0;
let every = REFRESH_MS;

function parts() {
  try {
    return location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  } catch {
    return [""]; // a malformed address: the overview
  }
}

function breadcrumbs([view, ...params]) {
  const trail = [link("Overview", "")];
  if (view === "functions" || view === "function") trail.push(link("Functions", "functions"));
  else if (view !== "") trail.push(link("Tenants", "tenants"));
  if (view === "function") params = [null]; // the title names it
  const [domain, tenant, namespace, name] = view === "topic" || view === "messages" ? params : [null, ...params];
  if (view !== "tenants" && tenant) trail.push(link(tenant, "tenant", tenant));
  if (namespace) trail.push(link(namespace, "namespace", tenant, namespace));
  if (name) trail.push(link(name, "topic", domain, tenant, namespace, name));
  return el("nav", { class: "breadcrumbs", "aria-label": "Where" }, trail.flatMap((item, i) => (i ? [" / ", item] : [item])));
}

async function refresh() {
  if (current === null || busy) return;
  busy = true;
  const view = current;
  try {
    await view.refresh();
    const pace = every > REFRESH_MS ? ` (every ${Math.round(every / 1000)} s: a large broker)` : "";
    if (view === current) status.textContent = `updated ${new Date().toLocaleTimeString()}${pace}`;
    signInForm.hidden = true;
  } catch (error) {
    if (view !== current) return;
    if (error instanceof AuthRequired) {
      signedOut = true;
      signInForm.hidden = false;
      document.getElementById("sign-in-reason").textContent = `The admin API asks for a token: ${error.message}`;
      status.textContent = "signed out";
    } else {
      status.textContent = `error: ${error.message}`;
    }
  } finally {
    busy = false;
    signOutButton.hidden = !signedIn();
  }
}

/** Refreshes the view, then again after REFRESH_MS or what SHARE asks; only while the tab is
 * visible (showing it again ticks at once), the view is one that refreshes itself, and no
 * token is awaited (signing in mounts the view again). */
async function tick() {
  clearTimeout(timer);
  const mine = ++ticks;
  if (document.hidden || current === null || current.manual || signedOut) return;
  takeReceived();
  await refresh();
  if (mine !== ticks) return; // a later tick (another view, the tab shown again) schedules the next
  every = Math.max(REFRESH_MS, (SHARE * takeReceived()) / BYTES_PER_MS);
  timer = setTimeout(tick, every);
}

function mount() {
  const address = parts();
  const [name, ...params] = address;
  const make = Object.hasOwn(VIEWS, name) ? VIEWS[name] : overview;
  current = make(params);
  busy = false;
  signedOut = false;
  document.title = `${current.title} · magnetar`;
  main.replaceChildren(breadcrumbs(Object.hasOwn(VIEWS, name) ? address : [""]), el("h1", {}, current.title),
    current.node);
  if (current.manual) refresh();
  tick();
}

signInForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const field = document.getElementById("token");
  signIn(field.value.trim());
  field.value = "";
  mount();
});
signOutButton.addEventListener("click", () => {
  signOut();
  mount();
});
window.addEventListener("hashchange", mount);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) tick();
});
mount();
