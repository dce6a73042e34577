"use strict";
const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "maestro-token";

// --- Authentication -------------------------------------------------------
// The token may arrive once in the URL fragment (#token=...). Keep it in
// sessionStorage and strip it from the address bar so it is not bookmarked or shared.
// Every page of this server reads it from there, so a link between pages needs no token.
let token = null;
try { token = sessionStorage.getItem(TOKEN_KEY); } catch (_) { /* storage disabled */ }
{
  const m = location.hash.match(/^#(?:.*&)?token=([^&]*)/);
  if (m) {
    try { token = decodeURIComponent(m[1]); } catch (_) { token = m[1]; }
    try { sessionStorage.setItem(TOKEN_KEY, token); } catch (_) {}
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function authHeaders() {
  return token ? { Authorization: "Bearer " + token } : {};
}

function showTokenForm() {
  const form = $("token-form");
  if (form.hidden) { form.hidden = false; form.elements.token.focus(); }
}

// What the page does once a token is given; each page sets it.
let onTokenGiven = () => {};

$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const value = e.target.elements.token.value.trim();
  if (!value) return;
  token = value;
  try { sessionStorage.setItem(TOKEN_KEY, token); } catch (_) {}
  e.target.elements.token.value = "";
  e.target.hidden = true;
  onTokenGiven();
  wakeStream();
});

// --- API ------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

// A call of the API; `as` is how the body is read ("json" or "text").
async function api(method, path, body, as = "json") {
  const headers = authHeaders();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers, cache: "no-store",
                              body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, "network", "Cannot reach the server: " + err.message);
  }
  if (res.status === 401) showTokenForm();
  if (res.ok) return as === "text" ? res.text() : res.json();
  // Errors are {"error": {"code", "message"}}; anything else (a proxy page…) falls back to the status.
  const text = await res.text().catch(() => "");
  let code = "http_" + res.status, message = `HTTP ${res.status} ${res.statusText}`.trim();
  try {
    const e = JSON.parse(text).error;
    if (e && e.message) { code = e.code || code; message = e.message; }
  } catch (_) { /* not JSON */ }
  throw new ApiError(res.status, code, message);
}

// A refresh that runs `load` with at most one in flight; calls meanwhile cause exactly one more.
function coalesced(load) {
  let running = false, again = false;
  return async () => {
    if (running) { again = true; return; }
    running = true;
    try {
      do { again = false; await load(); } while (again);
    } finally { running = false; }
  };
}

// Runs `read`; a failure shows in #load-error, but a missing token, which the token form asks for.
async function loadOrSay(what, read) {
  try {
    await read();
    $("load-error").hidden = true;
  } catch (err) {
    if (err.status === 401) return;
    $("load-error").textContent = `Could not load ${what}: ${err.message}`;
    $("load-error").hidden = false;
  }
}

// --- DOM helpers (data only ever goes through textContent / attributes) ----
function el(tag, props = {}, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v == null || v === false) continue;
    if (k === "text") n.textContent = v;
    else if (k === "class") n.className = v;
    else n.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids) if (kid != null) n.append(kid);  // strings become text nodes
  return n;
}
const button = (action, label) => el("button", { type: "button", "data-action": action, text: label });
const when = (ms) => (typeof ms === "number" ? new Date(ms).toLocaleString() : "—");
const jobLink = (id, cls) => el("a", { class: cls, href: "/jobs/" + encodeURIComponent(id), text: id });

// Arguments are shown verbatim: what the human approves must be exactly what the tool receives.
function argumentsBlock(raw) {
  const exact = typeof raw === "string" ? raw : JSON.stringify(raw);
  const out = [el("pre", { class: "arguments", text: exact })];
  try {
    const value = JSON.parse(exact);
    const pretty = JSON.stringify(value, null, 2);
    if (value && typeof value === "object" && pretty !== exact) {
      out.push(el("details", { class: "pretty" }, el("summary", { text: "Pretty-printed" }),
                  el("pre", { class: "arguments-pretty", text: pretty })));
    }
  } catch (_) { /* not JSON: the exact string is enough */ }
  return out;
}

const WAITS_FOR = { question: "an answer to a question", tool_approval: "approval of a tool call",
                    browser_login: "a browser login", burst_confirmation: "a go-ahead after many tool calls",
                    skill_selection: "a piece to be chosen", intake: "its intake to be filled in",
                    artifact_review: "the review of an artifact", revision_instruction: "what to change in a revision",
                    worker_question: "an answer to its worker's question", subtasks: "its subtasks to end",
                    worker: "its worker" };

// An artifact's body as it is meant to be read: Markdown and plain text as text, JSON
// pretty-printed, anything else as a download. Never as HTML.
function artifactBody(artifact) {
  const type = String(artifact.media_type || "");
  const body = String(artifact.body ?? "");
  if (type === "application/json") {
    let pretty = body;
    try { pretty = JSON.stringify(JSON.parse(body), null, 2); } catch (_) { /* shown as it is */ }
    return el("pre", { class: "artifact-body", "data-rendered": "json", text: pretty });
  }
  if (type.startsWith("text/")) {
    return el("pre", { class: "artifact-body", "data-rendered": "text", text: body });
  }
  const link = el("a", { class: "artifact-download", download: (artifact.title || "artifact").replace(/[^\w.-]+/g, "_"),
                         text: `Download (${type}, ${body.length} bytes)` });
  link.href = URL.createObjectURL(new Blob([body], { type }));
  return el("p", { "data-rendered": "download" }, link);
}

// --- Event streams --------------------------------------------------------------
// fetch() + a stream reader instead of EventSource, which cannot send Authorization.
function setConnection(state) {
  const c = $("connection");
  c.textContent = { live: "live", down: "reconnecting…", ended: "ended" }[state];
  c.className = state;
}

// Parses SSE framing; calls onEvent(type, data, id) for each complete event.
async function readEvents(body, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "", type = "", data = [], id = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      let line = buf.slice(0, nl); buf = buf.slice(nl + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {  // a blank line ends the event
        if (type || data.length) onEvent(type || "message", data.join("\n"), id);
        type = ""; data = []; id = "";
        continue;
      }
      if (line.startsWith(":")) continue;  // comment / keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? "" : line.slice(colon + 1);
      if (val.startsWith(" ")) val = val.slice(1);
      if (field === "event") type = val;
      else if (field === "data") data.push(val);
      else if (field === "id") id = val;
    }
  }
}

let wake = null;  // cuts the reconnect wait short, e.g. once a token is given
const wakeStream = () => wake && wake();

// Follows the event stream at `path()` (asked again at each connect, so a job's stream resumes
// after the last event seen), reconnecting with backoff, until a stream ends with an event for
// which `onEvent` returns "ended".
async function follow(path, onOpen, onEvent) {
  let delay = 1000;
  for (;;) {
    let ended = false;
    try {
      const res = await fetch(path(), { headers: authHeaders(), cache: "no-store" });
      if (res.status === 401) showTokenForm();
      if (res.status === 404) { setConnection("ended"); return; }  // nothing there to come back to
      if (!res.ok || !res.body) throw new Error("HTTP " + res.status);
      setConnection("live");
      delay = 1000;
      onOpen();
      await readEvents(res.body, (type, data, id) => {
        if (onEvent(type, data, id) === "ended") ended = true;
      });
    } catch (_) { /* fall through to reconnect */ }
    if (ended) { setConnection("ended"); return; }
    setConnection("down");
    await new Promise((resolve) => { wake = resolve; setTimeout(resolve, delay); });
    delay = Math.min(delay * 2, 10000);
  }
}
