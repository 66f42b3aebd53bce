// The M3 inbox page: the live list of pending rounds (Server-Sent Events from
// /api/events, read with fetch), a sign-in with the service's bearer token when
// it asks for one (kept in sessionStorage, sent as Authorization: Bearer), a form per round rendered from its requests' JSON schemas
// (MCP's flat form schemas: string, number, integer, boolean, string arrays),
// validation as the person types, and answers sent with an idempotency key kept
// in localStorage until the service acknowledged it. An answered round is followed
// until it resolves or fails, and then its execution until it finishes; a round that
// leaves pending elsewhere while its form is open keeps the typed text, read-only.
// No dependencies.
"use strict";

const KEY_PREFIX = "m3-inbox-idempotency-key:";
const ACTIONS = ["accept", "decline", "cancel"];
const STEPS = [
  ["create_time", "created (pending)"],
  ["response_validate_time", "answer accepted"],
  ["delivery_start_time", "delivery started"],
  ["deliver_time", "delivered to the MCP server"],
  ["resolve_time", "resolved"],
  ["fail_time", "failed"],
];

// Round statuses that do not change any more.
const TERMINAL = new Set(["resolved", "failed"]);
// How often a followed round or execution is read again when no pushed event of its
// execution comes first: soon after the answer, then less often.
const FOLLOW_FIRST_MS = 500;
const FOLLOW_LONGEST_MS = 5000;

const $ = (id) => document.getElementById(id);
const pending = new Map(); // round_id -> PendingElicitationRound (proto JSON)
// The round on the page: {round, fields: [{key, name, schema, required, input, error,
// read}], formOpen (its form can be answered), answered (this page's answer arrived),
// frozen (it left pending elsewhere while its form was open)}.
let current = null;
let uid = 0;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === undefined || value === null) continue;
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

const statusName = (status) =>
  String(status || "").replace("MANAGED_INPUT_STATUS_", "").toLowerCase();
const enumName = (value, prefix) => String(value || "").replace(prefix, "").toLowerCase();
const when = (stamp) => (stamp ? new Date(stamp).toLocaleString() : "");

// -- the live list ----------------------------------------------------------------

// The live list reads /api/events with fetch rather than EventSource, which
// cannot send the Authorization header; like EventSource it reconnects after a
// second and resumes with Last-Event-ID.
let lastEventId = "";
let connection = 0; // a newer connect() ends the loops of older ones

async function connect() {
  const generation = ++connection;
  while (generation === connection) {
    try {
      const headers = lastEventId ? { "Last-Event-ID": lastEventId } : {};
      const reply = await api("/api/events", { headers, cache: "no-store" });
      if (reply.status === 401) return; // signing in connects again
      if (!reply.ok || !reply.body) throw new Error(`HTTP ${reply.status}`);
      setConnection("live", "Live: new rounds appear by themselves.");
      await readEvents(reply.body, generation);
    } catch {
      // reconnect below
    }
    if (generation !== connection) return;
    setConnection("down", "Connection lost; reconnecting\u2026");
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// Server-Sent Events framing: `field: value` lines, a blank line ends a message.
async function readEvents(body, generation) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let message = { event: "message", data: [], id: null };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done || generation !== connection) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, end).replace(/\r$/, "");
        buffer = buffer.slice(end + 1);
        if (line === "") {
          dispatch(message);
          message = { event: "message", data: [], id: null };
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const name = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (name === "event") message.event = text;
          else if (name === "data") message.data.push(text);
          else if (name === "id") message.id = text;
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function dispatch(message) {
  if (message.id !== null) lastEventId = message.id;
  if (!message.data.length) return;
  const data = JSON.parse(message.data.join("\n"));
  if (message.event === "round_pending") {
    const round = data.round_pending;
    pending.set(round.round_id, round);
    renderList();
    nudge(round.execution_id);
  } else if (message.event === "round_left_pending") {
    const left = data.round_left_pending;
    pending.delete(left.round_id);
    renderList();
    if (current && current.round.round_id === left.round_id) openRound(left.round_id, false);
    else nudge(left.execution_id);
  } else if (message.event === "execution_finished") {
    nudge(data.execution_finished.execution_id);
  } else if (message.event === "stream_error") {
    lastEventId = ""; // a cursor the service cannot read: start over
  }
}

// -- access: the service's bearer token, kept for this tab only ----------------------

const TOKEN_KEY = "m3-inbox-token";

function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  return fetch(path, { ...options, headers }).then((reply) => {
    if (reply.status === 401) askForToken(Boolean(token));
    return reply;
  });
}

function askForToken(rejected) {
  sessionStorage.removeItem(TOKEN_KEY);
  connection++; // the live list waits for the token
  $("login").hidden = false;
  $("login-problem").textContent = rejected ? "That token was not accepted." : "";
  setConnection("down", "Sign in with your access token to see your rounds.");
  $("token").focus();
}

function signIn(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  $("login").hidden = true;
  pending.clear();
  lastEventId = "";
  renderList();
  connect();
  const id = selectedRoundId();
  if (id) openRound(id, false);
}

function setConnection(state, text) {
  $("connection").dataset.state = state;
  $("connection").textContent = text;
}

const requestMessage = (request) => ((request || {}).form || (request || {}).url || {}).message || "";
const firstMessage = (round) => requestMessage(Object.values(round.requests || {})[0]);

// What the page calls a round: the server's own question, not its IDs (those are in
// the details).
function roundTitle(round) {
  const requests = Object.values(round.requests || {});
  const server = round.server || "an MCP server";
  if (requests.length === 1) return requestMessage(requests[0]) || `Input requested by ${server}`;
  return `${requests.length} requests from ${server}`;
}

const operationText = (round) =>
  `${enumName(round.operation_kind, "OPERATION_KIND_")} ${round.operation_name || ""}`.trim();

function renderList() {
  const list = $("pending");
  list.replaceChildren();
  const rounds = [...pending.values()].sort((a, b) =>
    (a.create_time || "").localeCompare(b.create_time || ""),
  );
  for (const round of rounds) {
    const link = el(
      "a",
      {
        href: "#round=" + encodeURIComponent(round.round_id),
        "aria-current": current && current.round.round_id === round.round_id ? "true" : false,
      },
      el("span", { text: firstMessage(round) || round.round_id }),
      el("br"),
      el("span", {
        class: "meta",
        text: `${round.server || ""} \u00b7 ${round.operation_name || ""} \u00b7 ${when(round.create_time)}`,
      }),
    );
    list.append(el("li", { "data-round-id": round.round_id }, link));
  }
  $("pending-count").textContent = String(rounds.length);
  $("empty").hidden = rounds.length > 0;
}

// -- one round --------------------------------------------------------------------

function selectedRoundId() {
  const match = /^#round=(.+)$/.exec(location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

async function openRound(roundId, focus = true) {
  const reply = await api("/api/rounds/" + encodeURIComponent(roundId));
  const body = await reply.json();
  if (!reply.ok) {
    $("round").hidden = false;
    showNotice("error", body.error ? body.error.message : "The round cannot be read.");
    return;
  }
  const round = body.round;
  const isNew = !current || current.round.round_id !== round.round_id;
  if (isNew) {
    current = { round, fields: [], formOpen: false, answered: false, frozen: false };
    followGeneration++; // stop following the round shown before
    setOutcome("", null);
  } else {
    current.round = round;
  }
  $("round").hidden = false;
  $("round-heading").textContent = roundTitle(round);
  renderRound(round);
  renderList();
  if (isNew) showNotice("", "");
  const stored = localStorage.getItem(KEY_PREFIX + round.round_id);
  const status = statusName(round.status);
  if (status === "pending") {
    // Drawn once: drawing it again would lose what the person typed.
    if (!current.formOpen) renderForm(round);
  } else {
    if (stored && round.responses && round.responses.idempotency_key === stored) {
      // Our answer arrived even if its reply did not: acknowledged now.
      localStorage.removeItem(KEY_PREFIX + round.round_id);
      current.answered = true;
      showNotice("ok", "Your answer was recorded."); // its status, as it moves on, is above
    }
    if (current.answered) {
      closeForm();
    } else if (current.formOpen) {
      // Cancelled, failed or answered elsewhere while the form was open: say so, and
      // keep what was typed readable (and copyable) instead of taking it away.
      if (stored) localStorage.removeItem(KEY_PREFIX + round.round_id); // never sent
      freezeForm();
      showNotice("error", missedMessage(round));
    } else if (!current.frozen) {
      closeForm();
      if (isNew) showNotice("", `This round is no longer pending (status: ${status}).`);
    }
    follow(round.round_id);
  }
  if (focus) $("round-heading").focus();
}

function renderRound(round) {
  $("round-summary").textContent =
    `${operationText(round)} on ${round.server || "?"} \u00b7 status: ${statusName(round.status)}`;
  renderFacts(round);
  renderHistory(round);
}

function missedMessage(round) {
  const status = statusName(round.status);
  const kept = " Your answer was not sent; what you typed stays below, read-only, to copy.";
  if (status === "failed") {
    if (round.failure_code === "cancelled") {
      return "This round was cancelled elsewhere (its execution was cancelled) while you were answering it." + kept;
    }
    const why = [round.failure_code, round.failure_message].filter(Boolean).join(": ") || "failed";
    return `This round failed while you were answering it (${why}).` + kept;
  }
  return `Someone else answered this round while you were answering it (status: ${status}).` + kept;
}

function closeForm() {
  current.formOpen = false;
  $("answer").hidden = true;
}

function freezeForm() {
  current.formOpen = false;
  current.frozen = true;
  for (const input of $("answer").querySelectorAll("input, select, textarea")) {
    const textual = input.tagName !== "SELECT" && !["checkbox", "radio"].includes(input.type);
    if (textual) input.readOnly = true;
    else input.disabled = true;
  }
  $("send").hidden = true;
  $("answer").classList.add("frozen");
}

// -- following an answered round to its end, and its execution ---------------------

let followGeneration = 0; // a newer follow() ends the loops of older ones
let wakeFollower = null; // ends the follower's pause early

// A pushed event of the followed execution: read it again now, not at the next tick.
function nudge(executionId) {
  if (current && current.round.execution_id === executionId && wakeFollower) wakeFollower();
}

function pause(ms) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      if (wakeFollower === done) wakeFollower = null;
      resolve();
    };
    const timer = setTimeout(done, ms);
    wakeFollower = done;
  });
}

async function follow(roundId) {
  const generation = ++followGeneration;
  const following = () => generation === followGeneration && current && current.round.round_id === roundId;
  let wait = FOLLOW_FIRST_MS;
  while (following()) {
    try {
      if (!TERMINAL.has(statusName(current.round.status))) {
        const reply = await api("/api/rounds/" + encodeURIComponent(roundId));
        const body = await reply.json();
        if (!following()) return;
        if (reply.ok) {
          current.round = body.round;
          renderRound(body.round);
        }
      }
      if (TERMINAL.has(statusName(current.round.status)) && (await showOutcome(current.round))) return;
    } catch {
      // read again at the next tick
    }
    if (!following()) return;
    await pause(wait);
    wait = Math.min(wait * 2, FOLLOW_LONGEST_MS);
  }
}

// The execution's state under the round; true once it finished.
async function showOutcome(round) {
  const reply = await api("/api/executions/" + encodeURIComponent(round.execution_id));
  const body = await reply.json();
  if (!reply.ok || !current || current.round.round_id !== round.round_id) return false;
  const state = body.execution;
  if (enumName(state.lifecycle, "EXECUTION_STATUS_") === "finished") {
    const outcome = enumName(state.outcome, "EXECUTION_OUTCOME_");
    const why = outcome === "failed" ? [state.failure_code, state.failure_message].filter(Boolean).join(": ") : "";
    setOutcome(outcome === "succeeded" ? "ok" : "error", `The execution finished: ${outcome}${why ? ` (${why})` : ""}.`);
    return true;
  }
  const next = [...pending.values()].find((r) => r.execution_id === round.execution_id && r.round_id !== round.round_id);
  if (next) {
    setOutcome("", "The execution asked for more input: ", el("a", { href: "#round=" + encodeURIComponent(next.round_id), text: firstMessage(next) || "the next round" }));
  } else {
    setOutcome("", `The execution is ${enumName(state.lifecycle, "EXECUTION_STATUS_").replace(/_/g, " ")}.`);
  }
  return false;
}

function setOutcome(kind, ...children) {
  const outcome = $("outcome");
  outcome.dataset.kind = kind;
  outcome.replaceChildren(...children.filter(Boolean));
  outcome.hidden = !outcome.textContent;
}

function renderFacts(round) {
  const facts = $("round-facts");
  facts.replaceChildren();
  const rows = [
    ["Status", statusName(round.status)],
    ["Round ID", round.round_id],
    ["Execution ID", round.execution_id],
    ["Server", round.server],
    ["Operation", operationText(round)],
    ["Request keys", Object.keys(round.requests || {}).sort().join(", ")],
    ["Round", `${(round.round_index || 0) + 1} of at most ${round.round_limit || "?"}`],
    ["Deadline", round.deadline ? when(round.deadline) : "none"],
  ];
  for (const [name, value] of rows) facts.append(el("dt", { text: name }), el("dd", { text: value }));
}

function renderHistory(round) {
  const list = $("history");
  list.replaceChildren();
  for (const [field, label] of STEPS) {
    if (!round[field]) continue;
    let text = `${when(round[field])}: ${label}`;
    if (field === "fail_time") text += ` (${round.failure_code}${round.failure_message ? ": " + round.failure_message : ""})`;
    list.append(el("li", { text }));
  }
  if (round.responses) {
    // Redacted: actions and content keys only, never content values.
    for (const [key, answer] of Object.entries(round.responses.responses || {})) {
      const action = String(answer.action || "").replace("ELICITATION_ACTION_", "").toLowerCase();
      const keys = (answer.content_keys || []).join(", ");
      list.append(el("li", { text: `answer to ${key}: ${action}${keys ? " with " + keys : ""}` }));
    }
    list.append(el("li", { text: `idempotency key: ${round.responses.idempotency_key}` }));
  }
  if (round.delivery_attempts) list.append(el("li", { text: `delivery attempts: ${round.delivery_attempts}` }));
}

// -- the form ---------------------------------------------------------------------

function renderForm(round) {
  const container = $("requests");
  container.replaceChildren();
  current.fields = [];
  const keys = Object.keys(round.requests || {}).sort();
  for (const key of keys) container.append(requestFieldset(key, round.requests[key], keys.length > 1));
  $("answer").hidden = false;
  $("answer").classList.remove("frozen");
  $("send").hidden = false;
  $("send").textContent = "Send answer";
  current.formOpen = true;
}

// A request's box leads with the schema's title, else (among several) the server's
// message; with one request the page's heading is its message already. Its request
// key is in the round's details.
function requestFieldset(key, request, several) {
  const mode = request.url ? "url" : "form";
  const body = request.url || request.form || {};
  const title = mode === "form" ? (body.requested_schema || {}).title : undefined;
  const legend = title || (several && body.message) || "Your answer";
  const box = el("fieldset", { "data-request-key": key }, el("legend", { text: legend }));
  if (several && title && body.message) box.append(el("p", { class: "message", text: body.message }));
  const actions = el("fieldset", { class: "actions" }, el("legend", { text: "Answer" }));
  const name = "action-" + ++uid;
  for (const action of ACTIONS) {
    const id = `${name}-${action}`;
    const input = el("input", { type: "radio", name, id, value: action, checked: action === "accept" });
    input.addEventListener("change", () => toggleContent(box));
    const label = mode === "url" && action === "accept" ? "Accept (consent)" : action[0].toUpperCase() + action.slice(1);
    actions.append(el("span", { class: "choice" }, input, el("label", { for: id, text: label })));
  }
  box.append(actions);
  const content = el("div", { class: "content" });
  if (mode === "url") {
    content.append(
      el("p", {}, "URL: ", el("a", { class: "url", href: body.url, rel: "noopener noreferrer", target: "_blank", text: body.url })),
      el("p", { class: "description", text: "M3 never opens this URL; accepting records your consent." }),
    );
    const id = "f-" + ++uid;
    const consent = el("input", { type: "checkbox", id, "data-consent": key });
    const error = el("p", { class: "error", id: id + "-error" });
    consent.setAttribute("aria-describedby", error.id);
    const field = { key, name: null, consent: true, input: consent, error, read: () => consent.checked };
    consent.addEventListener("change", () => check(field));
    current.fields.push(field);
    const row = el("div", { class: "check" }, consent, el("label", { for: id, text: "I consent to this URL request" }));
    content.append(el("div", { class: "field" }, row, error));
  } else {
    const schema = body.requested_schema || {};
    const required = schema.required || [];
    const names = Object.keys(schema.properties || {});
    names.sort((a, b) => {
      const ra = required.indexOf(a), rb = required.indexOf(b);
      if (ra >= 0 || rb >= 0) return (ra < 0 ? 1e9 : ra) - (rb < 0 ? 1e9 : rb);
      return a < b ? -1 : a > b ? 1 : 0;
    });
    for (const prop of names) content.append(formField(key, prop, schema.properties[prop], required.includes(prop)));
  }
  box.append(content);
  return box;
}

function toggleContent(box) {
  const accept = box.querySelector(':scope > .actions input[value="accept"]').checked;
  box.querySelector(":scope > .content").hidden = !accept;
}

function choices(schema) {
  if (Array.isArray(schema.enum)) {
    return schema.enum.map((value, i) => [value, (schema.enumNames || [])[i] || String(value)]);
  }
  const options = schema.oneOf || schema.anyOf;
  if (Array.isArray(options) && options.every((o) => o && "const" in o)) {
    return options.map((o) => [o.const, o.title || String(o.const)]);
  }
  return null;
}

function formField(key, name, schema, required) {
  const id = "f-" + ++uid;
  const wrap = el("div", { class: "field", "data-field": name });
  const title = schema.title || name;
  const help = schema.description ? el("p", { class: "description", id: id + "-help", text: schema.description }) : null;
  const error = el("p", { class: "error", id: id + "-error" });
  const described = [help && help.id, error.id].filter(Boolean).join(" ");
  const labelChildren = [title, required ? el("span", { class: "req", "aria-hidden": "true", text: " *" }) : null];
  const field = { key, name, schema, required, error };
  const type = schema.type;
  const options = type === "array" ? choices(schema.items || {}) : choices(schema);
  if (type === "array") {
    // Multi-select: one checkbox per choice.
    const group = el("fieldset", { "aria-describedby": described }, el("legend", {}, ...labelChildren));
    const boxes = (options || []).map(([value, text]) => {
      const boxId = "f-" + ++uid;
      const input = el("input", { type: "checkbox", id: boxId, value, checked: (schema.default || []).includes(value) });
      input.addEventListener("change", () => check(field));
      group.append(el("span", { class: "choice" }, input, el("label", { for: boxId, text })));
      return input;
    });
    field.input = group;
    field.read = () => boxes.filter((b) => b.checked).map((b) => b.value);
    wrap.append(...[group, help, error].filter(Boolean));
  } else if (type === "boolean") {
    const input = el("input", { type: "checkbox", id, checked: schema.default === true, "aria-describedby": described });
    input.addEventListener("change", () => check(field));
    field.input = input;
    field.read = () => input.checked;
    const row = el("div", { class: "check" }, input, el("label", { for: id }, ...labelChildren));
    wrap.append(...[row, help, error].filter(Boolean));
  } else {
    let input;
    if (options) {
      input = el("select", { id, "aria-describedby": described, "aria-required": required ? "true" : false });
      if (!required || schema.default === undefined) input.append(el("option", { value: "", text: "(choose)" }));
      options.forEach(([value, text], i) => input.append(el("option", { value: String(i), text, selected: value === schema.default })));
      field.read = () => (input.value === "" ? undefined : options[Number(input.value)][0]);
    } else {
      const kinds = { email: "email", uri: "url", date: "date" };
      const inputType = type === "number" || type === "integer" ? "number" : kinds[schema.format] || "text";
      input = el("input", {
        type: inputType,
        id,
        "aria-describedby": described,
        "aria-required": required ? "true" : false,
        step: type === "integer" ? "1" : type === "number" ? "any" : false,
        inputmode: type === "integer" ? "numeric" : type === "number" ? "decimal" : false,
        placeholder: schema.format === "date-time" ? "2026-01-31T09:00:00Z" : false,
      });
      if (schema.default !== undefined && schema.default !== null) input.value = String(schema.default);
      field.read = () => readScalar(input, type);
    }
    input.addEventListener("input", () => check(field));
    input.addEventListener("blur", () => check(field));
    field.input = input;
    wrap.append(...[el("label", { for: id }, ...labelChildren), help, input, error].filter(Boolean));
  }
  current.fields.push(field);
  return wrap;
}

function readScalar(input, type) {
  const text = input.value;
  if (text.trim() === "" && (type === "number" || type === "integer")) {
    // A number input reports "" for text it cannot parse: tell the two apart.
    return input.validity && input.validity.badInput ? NaN : undefined;
  }
  if (text === "") return undefined;
  if (type === "number" || type === "integer") return Number(text);
  return text;
}

const FORMATS = {
  email: [/^[^@\s]+@[^@\s]+$/, "an email address"],
  uri: [/^[A-Za-z][A-Za-z0-9+.-]*:\S*$/, "a URI (e.g. https://example.com)"],
  date: [/^\d{4}-\d{2}-\d{2}$/, "a date (YYYY-MM-DD)"],
  "date-time": [/^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/, "a date and time with a time zone (2026-01-31T09:00:00Z)"],
};

// The first problem with the field's value, or "" (the server checks again).
function problem(field) {
  const value = field.read();
  if (field.consent) return "";
  const s = field.schema;
  if (value === undefined || (Array.isArray(value) && value.length === 0 && field.required)) {
    return field.required ? "This field is required." : "";
  }
  if (s.type === "number" || s.type === "integer") {
    if (Number.isNaN(value)) return "Enter a number.";
    if (s.type === "integer" && !Number.isInteger(value)) return "Enter a whole number.";
    if (s.minimum !== undefined && value < s.minimum) return `Must be at least ${s.minimum}.`;
    if (s.maximum !== undefined && value > s.maximum) return `Must be at most ${s.maximum}.`;
    if (s.exclusiveMinimum !== undefined && value <= s.exclusiveMinimum) return `Must be more than ${s.exclusiveMinimum}.`;
    if (s.exclusiveMaximum !== undefined && value >= s.exclusiveMaximum) return `Must be less than ${s.exclusiveMaximum}.`;
  } else if (s.type === "string" && typeof value === "string") {
    const length = [...value].length;
    if (s.minLength !== undefined && length < s.minLength) return `Must be at least ${s.minLength} characters.`;
    if (s.maxLength !== undefined && length > s.maxLength) return `Must be at most ${s.maxLength} characters.`;
    if (s.pattern !== undefined) {
      let ok = true;
      try { ok = new RegExp(s.pattern, "u").test(value); } catch { ok = true; } // the server decides
      if (!ok) return `Must match the pattern ${s.pattern}.`;
    }
    const format = FORMATS[s.format];
    if (format && !format[0].test(value)) return `Must be ${format[1]}.`;
  } else if (s.type === "array") {
    if (s.minItems !== undefined && value.length < s.minItems) return `Choose at least ${s.minItems}.`;
    if (s.maxItems !== undefined && value.length > s.maxItems) return `Choose at most ${s.maxItems}.`;
  }
  return "";
}

function check(field) {
  return setError(field, problem(field));
}

function setError(field, text) {
  field.error.textContent = text;
  if (text) field.input.setAttribute("aria-invalid", "true");
  else field.input.removeAttribute("aria-invalid");
  return !text;
}

function actionOf(key) {
  const box = [...document.querySelectorAll("#requests > fieldset")].find((b) => b.dataset.requestKey === key);
  return box.querySelector(":scope > .actions input:checked").value;
}

// -- answering --------------------------------------------------------------------

function idempotencyKey(roundId) {
  let key = localStorage.getItem(KEY_PREFIX + roundId);
  if (!key) {
    key = crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2);
    localStorage.setItem(KEY_PREFIX + roundId, key);
  }
  return key;
}

async function submit(event) {
  event.preventDefault();
  if (!current || !current.formOpen) return; // left pending meanwhile: nothing to send
  const round = current.round;
  const responses = {};
  const invalid = [];
  for (const key of Object.keys(round.requests || {})) {
    const action = actionOf(key);
    const response = { action: "ELICITATION_ACTION_" + action.toUpperCase() };
    const fields = current.fields.filter((f) => f.key === key);
    if (action === "accept" && round.requests[key].form) {
      response.content = {};
      for (const field of fields) {
        if (!check(field)) invalid.push(field);
        const value = field.read();
        if (value !== undefined && !(Array.isArray(value) && value.length === 0 && !field.required)) response.content[field.name] = value;
      }
    } else if (action === "accept") {
      for (const field of fields) {
        if (!setError(field, field.read() ? "" : "Give your consent to accept, or decline.")) invalid.push(field);
      }
    } else {
      fields.forEach((f) => setError(f, ""));
    }
    responses[key] = response;
  }
  if (invalid.length) {
    showNotice("error", `Fix ${invalid.length} field${invalid.length > 1 ? "s" : ""} before sending.`);
    (invalid[0].input.querySelector ? invalid[0].input.querySelector("input") || invalid[0].input : invalid[0].input).focus();
    return;
  }
  const key = idempotencyKey(round.round_id);
  $("send").disabled = true;
  showNotice("", "Sending\u2026");
  let reply, body;
  try {
    reply = await api(`/api/rounds/${encodeURIComponent(round.round_id)}/respond`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ idempotency_key: key, responses }),
    });
    body = await reply.json();
  } catch {
    $("send").disabled = false;
    // The live list may have shown meanwhile that it arrived (and forgot the key).
    if (!localStorage.getItem(KEY_PREFIX + round.round_id)) return;
    // The answer may or may not have arrived: the key stays, so sending again is safe.
    $("send").textContent = "Send again";
    showNotice("error", "The service did not confirm the answer. Sending again is safe: it cannot answer twice.");
    return;
  }
  $("send").disabled = false;
  if (reply.ok) {
    localStorage.removeItem(KEY_PREFIX + round.round_id);
    const how = body.replayed ? " It had already been recorded: nothing was answered twice." : "";
    showNotice("ok", `Answer recorded.${how}`); // its status, as it moves on, is above
    if (current && current.round.round_id === round.round_id) {
      current.answered = true;
      closeForm();
    }
    await openRound(round.round_id, false); // and follow it to its end
    return;
  }
  showError(body.error || { message: "The answer was refused." });
}

// `responses['KEY'].content.name` or `responses['KEY'].content['some name']`
const PATH = /^responses\['((?:[^'\\]|\\.)*)'\]\.content(?:\.([A-Za-z_][A-Za-z0-9_]*)|\['((?:[^'\\]|\\.)*)'\])/;

function showError(error) {
  const unplaced = [];
  for (const violation of error.field_violations || []) {
    const match = PATH.exec(violation.field);
    const unescape = (s) => s.replace(/\\(.)/g, "$1");
    const key = match && unescape(match[1]);
    const name = match && unescape(match[2] || match[3]);
    const field = match && current.fields.find((f) => f.key === key && f.name === name);
    if (field) setError(field, violation.description);
    else unplaced.push(`${violation.field}: ${violation.description}`);
  }
  const first = current.fields.find((f) => f.input.getAttribute("aria-invalid") === "true");
  if (first && first.input.focus) first.input.focus();
  const detail = unplaced.length ? " " + unplaced.join("; ") : "";
  showNotice("error", `${error.message}${detail}`);
  if (error.reason === "MANAGED_INPUT_CONFLICT" || error.code === "FAILED_PRECONDITION") openRound(current.round.round_id, false);
}

function showNotice(kind, text) {
  $("notice").dataset.kind = kind;
  $("notice").textContent = text;
}

document.addEventListener("DOMContentLoaded", () => {
  $("answer").addEventListener("submit", submit);
  $("login").addEventListener("submit", signIn);
  window.addEventListener("hashchange", () => {
    const id = selectedRoundId();
    if (id) openRound(id);
  });
  connect();
  const id = selectedRoundId();
  if (id) openRound(id, false);
});
