/*
 * loopengine chat: the conversation page's one script (a file: the page's CSP allows no inline code).
 *
 * - The composer (form#composer) sends a live message with the client module; the turn is followed
 *   (Server-Sent Events under loopengine dev, long polls elsewhere) and drawn as it happens: the
 *   model's text piece by piece, each call's outcome, each pending item as a card in the thread.
 * - A card decides through the JSON routes as the signed-in principal (X-Loopengine-Channel: chat):
 *   approve (with the arguments as edited, read back as the magic-link form reads them), deny with a
 *   comment, answer a question by an option or in words. A refused decision says why in the card.
 * - When the turn pauses or finishes the page takes the server's thread again (the same page, read
 *   with fetch), so what it shows is what a reload shows; a card being typed into is kept as it is.
 * - Stop (button[name=cancel]) cancels the turn and says what Stop cannot undo.
 */
import { ApiError, Client } from "./loopengine-client.js";

const ABSENT = Symbol("absent");
const SYNC_DELAY_MS = 60;
const SYNC_TRIES = 4;
const VERBS = { approve: ["approved", "Approved"], deny: ["denied", "Denied"], answer: ["answered", "Answered"] };
const ENDINGS = {
  denied: "The turn ended: a call was denied, so nothing after it ran.",
  cancelled: "Stopped: nothing further ran. What had already run stays done.",
  superseded: "Superseded: a new message came before anyone answered.",
  expired: "The turn ended: nobody answered in time.",
  max_iterations: "The turn ended: it reached its step limit.",
  error: "The turn ended with an error.",
};

const main = document.querySelector("main[data-chat]");
if (main) {
  start(main);
}

/** @param {HTMLElement} main */
function start(main) {
  const client = new Client({ channel: "chat" });
  const thread = /** @type {HTMLOListElement} */ (document.getElementById("thread"));
  const composer = /** @type {HTMLFormElement} */ (document.getElementById("composer"));
  const input = /** @type {HTMLTextAreaElement} */ (composer.elements.namedItem("message"));
  const stop = /** @type {HTMLButtonElement} */ (main.querySelector("button[name=cancel]"));
  const status = /** @type {HTMLElement} */ (document.getElementById("chat-status"));
  const agent = main.dataset.agent || "";
  const tenant = main.getAttribute("data-tenant");
  /** @type {{id: string | null, seq: number, finished: boolean}} */
  const turn = { id: main.dataset.turnId || null, seq: Number(main.dataset.cursor) || 0, finished: false };
  let sending = false;
  let syncTimer = 0;
  let stopNote = ""; // what the server said Stop cannot undo

  function say(text, problem = false) {
    status.textContent = text;
    status.classList.toggle("error", problem);
  }

  function problemText(error) {
    if (error instanceof ApiError && error.status === 401) {
      return "Your sign-in was refused: reload the page to sign in again.";
    }
    return error instanceof Error ? error.message : String(error);
  }

  function pageUrl(session) {
    const query = new URLSearchParams();
    if (session) query.set("session", session);
    if (tenant !== null) query.set("tenant", tenant);
    const text = query.toString();
    return `/chat/${encodeURIComponent(agent)}${text ? "?" + text : ""}`;
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function entry(role, text) {
    const item = element("li", `entry ${role}`);
    item.dataset.role = role;
    item.append(element("p", "text", text));
    thread.append(item);
    return item;
  }

  function setTurn(id, state) {
    if (id) {
      main.dataset.turnId = id;
      main.dataset.turnStatus = state;
    }
    stop.hidden = !id || state === "finished";
    stop.disabled = false;
    if (state === "paused") say("Waiting for your decision.");
    else if (state === "running" || state === "queued") say(state === "queued" ? "Queued." : "Working…");
  }

  // --- sending ------------------------------------------------------------------------------------

  async function send() {
    const text = input.value;
    if (sending || !text.trim()) return;
    sending = true;
    composer.setAttribute("aria-busy", "true");
    try {
      const session = main.getAttribute("data-session-id");
      const reply = await client.sendMessage(agent, text, { sessionId: session, tenant, live: true });
      input.value = "";
      if (!session) {
        main.setAttribute("data-session-id", reply.sessionId);
        window.history.replaceState(null, "", pageUrl(reply.sessionId));
      }
      entry("user", text);
      follow(reply.turnId, 0, reply.status);
    } catch (error) {
      say(problemText(error), true);
    } finally {
      sending = false;
      composer.removeAttribute("aria-busy");
    }
  }

  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });

  // --- following a turn ---------------------------------------------------------------------------

  async function follow(id, after, state) {
    turn.id = id;
    turn.seq = after;
    turn.finished = false;
    setTurn(id, state || "running");
    try {
      for await (const event of client.follow(id, { after })) {
        if (turn.id === id) turn.seq = event.seq;
        show(id, event);
      }
    } catch (error) {
      if (turn.id === id) say(`Lost the turn's events: ${problemText(error)}. Reload to see where it is.`, true);
    }
  }

  function streaming(call) {
    let item = thread.querySelector(`li[data-role=assistant][data-call="${CSS.escape(String(call))}"]`);
    if (!item) {
      item = entry("assistant", "");
      item.dataset.call = String(call);
      item.dataset.streaming = "true";
    }
    return item;
  }

  function piece(event) {
    const item = streaming(event.call);
    const text = item.querySelector("p.text");
    const shown = text.textContent;
    if (event.offset > shown.length) text.textContent = shown + " … " + event.text;
    else if (event.offset + event.text.length > shown.length) text.textContent = shown.slice(0, event.offset) + event.text;
  }

  function said(event) {
    const open = thread.querySelector("li[data-role=assistant][data-streaming]");
    if (open) {
      delete open.dataset.streaming;
      if (event.type === "model_response" && event.text) open.querySelector("p.text").textContent = event.text;
      else if (event.type !== "model_response") open.classList.add("incomplete");
    } else if (event.type === "model_response" && event.text) {
      entry("assistant", event.text);
    }
  }

  function show(id, event) {
    switch (event.type) {
      case "text:delta":
        return piece(event);
      case "model_response":
      case "model_call_abandoned":
      case "model_error":
        return said(event);
      case "tool_outcome": {
        const item = element("li", "entry tool");
        item.dataset.role = "tool";
        item.dataset.tool = event.tool;
        item.dataset.outcome = event.outcome;
        const line = element("p", "summary");
        line.append(element("code", "", event.tool), " ", element("span", "outcome", event.outcome));
        item.append(line);
        thread.append(item);
        return;
      }
      case "approval:pending":
      case "question:pending":
        if (!thread.querySelector(`[data-pending-id="${CSS.escape(event.pendingId)}"]`)) thread.append(eventCard(event));
        return sync();
      case "paused":
        if (turn.id === id) setTurn(id, "paused");
        return sync();
      case "resumed":
        if (turn.id === id) setTurn(id, "running");
        return;
      case "decided":
      case "expired":
        return decided(event);
      case "finished":
        if (turn.id === id) {
          turn.finished = true;
          setTurn(id, "finished");
          const ending = ENDINGS[event.stopReason] || `The turn ended: ${event.stopReason}.`;
          say(event.stopReason === "end_turn" ? "" : `${ending} ${stopNote}`.trim());
        }
        if (ENDINGS[event.stopReason]) {
          const note = element("li", "entry note");
          note.dataset.state = event.stopReason;
          note.append(element("p", "", ENDINGS[event.stopReason]));
          thread.append(note);
        }
        thread.querySelectorAll("[data-pending-id][data-state=open]").forEach((card) => {
          close(card, "closed", "Not decided: the turn ended first. This call did not run.");
        });
        return sync();
      default:
    }
  }

  function close(card, state, words) {
    card.dataset.state = state;
    card.classList.add("closed");
    card.querySelectorAll("button, input, select, textarea").forEach((control) => { control.disabled = true; });
    let fate = card.querySelector("p.fate");
    if (!fate) {
      fate = element("p", "fate");
      card.append(fate);
    }
    fate.textContent = words;
  }

  function decided(event) {
    const card = thread.querySelector(`[data-pending-id="${CSS.escape(event.pendingId)}"]`);
    if (!card) return;
    if (event.type === "expired") {
      close(card, "expired", "Expired: nobody answered in time. This call did not run.");
      return;
    }
    const [state, verb] = VERBS[event.decision] || ["closed", String(event.decision)];
    let words = `${verb} by ${event.decidedBy || "someone"}`;
    if (event.edited) words += ", with edits";
    if (event.comment) words += ` (“${event.comment}”)`;
    close(card, state, words);
  }

  // --- the server's thread, whenever the turn pauses or finishes ----------------------------------

  function sync(tries = SYNC_TRIES) {
    window.clearTimeout(syncTimer);
    syncTimer = window.setTimeout(() => resync(tries), SYNC_DELAY_MS);
  }

  async function resync(tries) {
    const session = main.getAttribute("data-session-id");
    if (!session || tries <= 0) return;
    const seen = turn.seq;
    let fresh;
    try {
      const response = await fetch(window.location.origin + pageUrl(session), {
        credentials: "same-origin",
        headers: { Accept: "text/html" },
      });
      if (!response.ok) return;
      fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    } catch {
      return;
    }
    const other = fresh.querySelector("main[data-chat]");
    const list = fresh.getElementById("thread");
    if (!other || !list || turn.seq !== seen) return sync(tries - 1); // more came meanwhile
    const same = turn.finished
      ? !other.dataset.turnId || other.dataset.turnId !== turn.id
      : other.dataset.turnId === turn.id && Number(other.dataset.cursor) === turn.seq;
    if (!same) return sync(tries - 1); // the page was read at another point of the turn: read it again
    const kept = new Map();
    thread.querySelectorAll("[data-pending-id][data-state=open][data-typed]").forEach((card) => {
      kept.set(card.dataset.pendingId, card);
    });
    const nodes = Array.from(list.children, (node) => {
      const card = node.querySelector("[data-pending-id][data-state=open]");
      const mine = card && kept.get(card.dataset.pendingId);
      return mine ? mine.closest("li") : document.importNode(node, true);
    });
    thread.replaceChildren(...nodes);
    main.dataset.synced = String(turn.seq);
  }

  // --- cards ----------------------------------------------------------------------------------------

  /** A card drawn from the event itself, until the server's (with the edit form) replaces it. */
  function eventCard(event) {
    const item = element("li", "entry tool asks");
    item.dataset.role = "tool";
    item.dataset.tool = event.tool;
    const card = element("article", "card");
    Object.assign(card.dataset, {
      pendingId: event.pendingId,
      kind: event.kind,
      tool: event.tool,
      state: "open",
      argsHash: event.argsHash,
      args: JSON.stringify(event.args || {}),
    });
    const form = element("form", "decide");
    form.noValidate = true;
    const guard = element("button");
    Object.assign(guard, { type: "submit", disabled: true, hidden: true });
    guard.setAttribute("aria-hidden", "true");
    form.append(guard);
    const actions = element("div", "actions");
    const button = (className, name, value, text) => {
      const b = element("button", className, text);
      Object.assign(b, { type: "submit", name, value });
      return b;
    };
    const field = (name, label) => {
      const id = `${name}-${event.pendingId}`;
      const box = element("textarea");
      Object.assign(box, { id, name, rows: 2 });
      const tag = element("label", "", label);
      tag.htmlFor = id;
      form.append(tag, box);
    };
    if (event.kind === "question") {
      card.append(element("h3", "", "The agent asks"), element("p", "question", event.question || event.reason));
      if (Array.isArray(event.options) && event.options.length) {
        const options = element("div", "actions");
        event.options.forEach((option) => options.append(button("choice", "choice", String(option), String(option))));
        form.append(options);
      }
      field("answer", "Your answer");
      actions.append(button("approve", "send", "answer", "Send answer"));
    } else {
      const title = element("h3");
      title.append(element("code", "", event.tool), " needs your approval");
      card.append(title, element("p", "reason", event.reason), element("pre", "args", JSON.stringify(event.args, null, 2)));
      field("comment", "Comment (optional; passed on with your decision)");
      actions.append(button("approve", "decision", "approve", "Approve"), button("deny", "decision", "deny", "Deny"));
    }
    const error = element("p", "error");
    error.setAttribute("role", "alert");
    error.hidden = true;
    form.append(error, actions);
    card.append(form);
    item.append(card);
    return item;
  }

  thread.addEventListener("input", (event) => {
    const card = event.target.closest && event.target.closest("[data-pending-id]");
    if (card) card.dataset.typed = "true";
  });

  thread.addEventListener("submit", async (event) => {
    const form = event.target.closest("form.decide");
    const card = form && form.closest("[data-pending-id]");
    if (!card) return;
    event.preventDefault();
    const button = event.submitter;
    const error = form.querySelector("p.error[role=alert]");
    const controls = form.querySelectorAll("button:not([hidden]), input, select, textarea");
    controls.forEach((control) => { control.disabled = true; });
    try {
      const answer = await decide(card, form, button);
      if (answer.alreadyResolved) close(card, "closed", "Already decided elsewhere.");
      else if (card.dataset.state === "open") card.dataset.state = "recorded";
      if (error) error.hidden = true;
    } catch (problem) {
      controls.forEach((control) => { control.disabled = false; });
      if (error) {
        error.textContent = problemText(problem);
        error.hidden = false;
      }
    }
  });

  /** @returns {Promise<Record<string, any>>} */
  function decide(card, form, button) {
    const pendingId = card.dataset.pendingId;
    if (card.dataset.kind === "question") {
      const text = button && button.name === "choice" ? button.value : form.elements.namedItem("answer").value.trim();
      if (!text) return Promise.reject(new Error("Type an answer, or choose one of the options."));
      return client.answer(pendingId, text);
    }
    const decision = button && button.name === "decision" ? button.value : "";
    const comment = (form.elements.namedItem("comment")?.value || "").replace(/\r\n/g, "\n").trim() || undefined;
    const argsHash = card.dataset.argsHash;
    if (decision === "deny") return client.deny(pendingId, { comment, argsHash });
    if (decision !== "approve") return Promise.reject(new Error("Choose Approve or Deny."));
    const editedArgs = edits(card, form); // throws, naming the fields whose text does not fit
    return client.approve(pendingId, { comment, argsHash, editedArgs: editedArgs || undefined });
  }

  // Stop -------------------------------------------------------------------------------------------

  stop.addEventListener("click", async () => {
    if (!turn.id) return;
    stop.disabled = true;
    try {
      const answer = await client.cancel(turn.id);
      stopNote = answer.note;
      if (!turn.finished) say(`${answer.cancelled ? "Stopped." : "Stopping…"} ${answer.note}`);
    } catch (error) {
      stop.disabled = false;
      say(problemText(error), true);
    }
  });

  if (turn.id) follow(turn.id, turn.seq, main.dataset.turnStatus);
}

// --- the edit form read back, as the magic-link form reads it (channels/magic/form.py) -------------

function same(a, b) {
  if (typeof a === "boolean" || typeof b === "boolean") return a === b;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => same(x, b[i]));
  if (a && b && typeof a === "object" && typeof b === "object" && !Array.isArray(a) && !Array.isArray(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && same(a[k], b[k]));
  }
  return a === b;
}

function coerce(field, text, current) {
  const { arg: name, kind } = field.dataset;
  const nullable = field.hasAttribute("data-nullable");
  if (kind === "string") {
    const value = typeof current === "string" && current.includes("\r") ? text : text.replace(/\r\n/g, "\n");
    if (value === "" && current === ABSENT) return ABSENT;
    if (value === "" && nullable) return null;
    return value;
  }
  const trimmed = text.trim();
  if (trimmed === "") {
    if (current === ABSENT) return ABSENT;
    if (nullable) return null;
    throw new Error(`${name}: a value is required`);
  }
  if (kind === "integer") {
    if (!/^[+-]?\d{1,30}$/.test(trimmed)) throw new Error(`${name}: enter a whole number`);
    return Number(trimmed);
  }
  if (kind === "number") {
    if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(trimmed)) throw new Error(`${name}: enter a number`);
    const value = Number(trimmed);
    if (!Number.isFinite(value)) throw new Error(`${name}: enter a finite number`);
    return value;
  }
  if (kind === "boolean") {
    if (text === "true" || text === "false") return text === "true";
    throw new Error(`${name}: choose true or false`);
  }
  if (kind === "enum") return field.hasAttribute("data-json-options") ? JSON.parse(text) : text;
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${name}: not valid JSON`);
  }
}

/** The edited arguments when any control differs from the pending call's, else null. */
function edits(card, form) {
  const args = JSON.parse(card.dataset.args || "{}");
  const edited = { ...args };
  const problems = [];
  let changed = false;
  form.querySelectorAll(".field[data-arg]").forEach((field) => {
    const control = form.elements.namedItem(field.dataset.control);
    if (!control) return;
    const name = field.dataset.arg;
    const current = Object.prototype.hasOwnProperty.call(args, name) ? args[name] : ABSENT;
    let value;
    try {
      value = coerce(field, control.value, current);
    } catch (error) {
      problems.push(error.message);
      return;
    }
    if (value === ABSENT) return;
    if (current === ABSENT || !same(value, current)) {
      edited[name] = value;
      changed = true;
    }
  });
  if (problems.length) throw new Error(problems.join("; "));
  return changed ? edited : null;
}
