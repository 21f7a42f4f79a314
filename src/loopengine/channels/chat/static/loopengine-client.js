/**
 * loopengine-client.js: talk to a loopengine API from any JavaScript that has fetch (a page, Node 18+,
 * Deno, a worker). A dependency-free ES module, served by every loopengine API at
 * GET /chat/static/loopengine-client.js; the conversation page (GET /chat/{agent}) is built on it.
 *
 *   import { Client } from "/chat/static/loopengine-client.js";
 *   const client = new Client({ token });               // a page of the API's own origin: no baseUrl
 *   const turn = await client.sendMessage("customer-service", "Order A-1001 arrived broken.");
 *   for await (const event of client.follow(turn.turnId)) {
 *     if (event.type === "text:delta") show(event.text);
 *     if (event.type === "approval:pending") await client.approve(event.pendingId, { argsHash: event.argsHash });
 *   }
 *
 * A message is sent with "Prefer: respond-async" (the answer comes at once with the turn's id) and an
 * Idempotency-Key (a lost answer is asked again with the same key: never a second turn). follow() reads
 * the turn's events as Server-Sent Events where the server streams them (loopengine dev), else as long
 * polls (API Gateway), resuming from the last event it saw, until the turn finishes. Errors are
 * ApiError (the API's {"error", "message"} and its HTTP status). docs/http-api.md, "Chat in the
 * browser", says more.
 */

/**
 * @typedef {Object} ClientOptions
 * @property {string} [baseUrl] the API's URL; default: the page's origin (in Node it is required)
 * @property {string} [token] a bearer token (a JWT), sent as "Authorization: Bearer <token>"
 * @property {string} [basic] "user:password" for HTTP Basic (a page of the API's origin needs neither:
 *   the browser sends the credentials it logged in with)
 * @property {string} [channel] a label the audit trail keeps beside each decision
 *   (X-Loopengine-Channel: "chat" or "live")
 * @property {Record<string, string>} [headers] more headers for every request
 * @property {typeof fetch} [fetch] the fetch to use (default: the global one)
 */

/**
 * @typedef {Object} PendingItem
 * @property {string} pendingId
 * @property {"approval" | "question"} kind
 * @property {string} tool
 * @property {Record<string, unknown>} args
 * @property {string} reason
 * @property {string} argsHash
 */

/**
 * What the messages route answers (and a decision with `wait`).
 * @typedef {Object} TurnReply
 * @property {"finished" | "paused" | "running" | "retrying" | "queued"} status
 * @property {string} turnId
 * @property {string} sessionId
 * @property {string | null} [stopReason]
 * @property {string | null} [text]
 * @property {PendingItem[]} [pendingItems]
 */

/**
 * What a decision answers: recorded (more outstanding, resuming, or a denial's finish), or already resolved.
 * @typedef {Object} Resolution
 * @property {true} [resolved]
 * @property {true} [alreadyResolved]
 * @property {true} [expired]
 * @property {number} [outstanding]
 * @property {string} [status]
 * @property {string} [stopReason]
 * @property {string} [turnId]
 */

/**
 * One event of a turn: its place in the turn's trail (`seq`), its `type` and time, and the fields of
 * that type (text:delta: call, offset, text; tool_outcome: tool, outcome; approval:pending and
 * question:pending: pendingId, tool, args, argsHash, reason, question, options; decided: pendingId,
 * decision, decidedBy, channel; finished: stopReason, text; ...).
 * @typedef {{seq: number, type: string, at: number} & Record<string, any>} TurnEvent
 */

/**
 * @typedef {Object} EventPage
 * @property {TurnEvent[]} events
 * @property {number} next the cursor to ask from next (`after`)
 * @property {boolean} finished the turn had finished before these were read
 */

/**
 * @typedef {Object} Cancelled
 * @property {string} turnId
 * @property {string} status
 * @property {string | null} stopReason
 * @property {boolean} cancelled
 * @property {string} note what Stop cannot undo
 */

/**
 * @typedef {Object} Session
 * @property {string} sessionId
 * @property {{role: "user" | "assistant", content: Record<string, any>[]}[]} messages
 */

const STREAM = "text/event-stream";
const RETRIES = 5;
/** Long-poll seconds (the API allows up to 25). */
export const WAIT_SECONDS = 20;

/** An error answer of the API: its HTTP status, its `error` code and `message`, the whole body. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {Record<string, any>} body
   */
  constructor(status, body) {
    super(typeof body.message === "string" ? body.message : `HTTP ${status}`);
    this.name = "ApiError";
    /** @type {number} */
    this.status = status;
    /** @type {string} */
    this.code = typeof body.error === "string" ? body.error : "http_" + status;
    /** @type {Record<string, any>} */
    this.body = body;
  }
}

/** @param {number} bytes @returns {string} */
function randomHex(bytes) {
  const data = new Uint8Array(bytes);
  globalThis.crypto.getRandomValues(data);
  return Array.from(data, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** @param {string} text @returns {string} */
function base64(text) {
  const bytes = new TextEncoder().encode(text);
  return btoa(Array.from(bytes, (b) => String.fromCharCode(b)).join(""));
}

/** @param {number} ms @param {AbortSignal | undefined} signal @returns {Promise<void>} */
function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/** @param {Response} response @returns {Promise<Record<string, any>>} */
async function readJson(response) {
  const text = await response.text();
  try {
    const data = text ? JSON.parse(text) : {};
    return data && typeof data === "object" ? data : {};
  } catch {
    return {};
  }
}

/**
 * The frames of a Server-Sent Events body: each frame's event name and its data (JSON).
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<{event: string, data: any}>}
 */
async function* serverSentEvents(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  /** @type {string[]} */
  let data = [];
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) {
        return;
      }
      buffer += decoder.decode(chunk.value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, end).replace(/\r$/, "");
        buffer = buffer.slice(end + 1);
        if (line === "") {
          if (data.length > 0) {
            yield { event, data: JSON.parse(data.join("\n")) };
          }
          event = "";
          data = [];
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") {
            event = value;
          } else if (field === "data") {
            data.push(value);
          }
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/** A loopengine API: messages, a turn's events, decisions, Stop, a session's history. */
export class Client {
  /** @param {ClientOptions} [options] */
  constructor(options = {}) {
    const origin = globalThis.location?.origin;
    const base = options.baseUrl ?? (origin && origin !== "null" ? origin : undefined);
    if (!base) {
      throw new TypeError("loopengine Client: baseUrl is required outside a page");
    }
    /** @type {string} */
    this.baseUrl = base.replace(/\/+$/, "");
    /** @type {Record<string, string>} */
    this.headers = { ...(options.headers ?? {}) };
    if (options.token) {
      this.headers.Authorization = `Bearer ${options.token}`;
    } else if (options.basic) {
      this.headers.Authorization = `Basic ${base64(options.basic)}`;
    }
    if (options.channel) {
      this.headers["X-Loopengine-Channel"] = options.channel;
    }
    /** @type {typeof fetch} */
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /**
   * @param {string} method
   * @param {string} path
   * @param {{body?: unknown, headers?: Record<string, string>, signal?: AbortSignal}} [init]
   * @returns {Promise<Response>}
   */
  request(method, path, init = {}) {
    /** @type {Record<string, string>} */
    const headers = { Accept: "application/json", ...this.headers, ...(init.headers ?? {}) };
    if (method !== "GET") {
      headers["Content-Type"] = "application/json"; // a cross-site page cannot send it without asking first
    }
    return this.fetch(this.baseUrl + path, {
      method,
      headers,
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      credentials: "same-origin",
      signal: init.signal,
    });
  }

  /**
   * @param {string} method
   * @param {string} path
   * @param {unknown} [body]
   * @param {Record<string, string>} [headers]
   * @returns {Promise<any>}
   */
  async call(method, path, body, headers) {
    const response = await this.request(method, path, { body, headers });
    const data = await readJson(response);
    if (!response.ok) {
      throw new ApiError(response.status, data);
    }
    return data;
  }

  /**
   * Send a message to an agent. Answers at once with the turn's id (status "running"; "queued" behind a
   * parked turn): follow() it. A message on a session whose turn is parked follows the agent's
   * on_new_message (by default it supersedes the wait).
   * @param {string} agent
   * @param {string} message
   * @param {{sessionId?: string | null, tenant?: string | null, live?: boolean, idempotencyKey?: string}} [options]
   *   live: someone is watching (a page, a chat): the pause's notifications wait the agent's live_wait
   * @returns {Promise<TurnReply>}
   */
  async sendMessage(agent, message, options = {}) {
    /** @type {Record<string, unknown>} */
    const body = { message, live: Boolean(options.live) };
    if (options.sessionId) {
      body.sessionId = options.sessionId;
    }
    if (options.tenant) {
      body.tenant = options.tenant;
    }
    const headers = {
      "Idempotency-Key": options.idempotencyKey ?? randomHex(16),
      Prefer: "respond-async",
    };
    const path = `/agents/${encodeURIComponent(agent)}/messages`;
    try {
      return await this.call("POST", path, body, headers);
    } catch (error) {
      if (error instanceof ApiError) {
        throw error;
      }
      return await this.call("POST", path, body, headers); // the answer was lost: the same key again
    }
  }

  /**
   * One read of a turn's events after `after`, long-polled up to `wait` seconds.
   * @param {string} turnId
   * @param {{after?: number, wait?: number, signal?: AbortSignal}} [options]
   * @returns {Promise<EventPage>}
   */
  async events(turnId, options = {}) {
    const path = `/turns/${encodeURIComponent(turnId)}/events?after=${options.after ?? 0}&wait=${options.wait ?? 0}`;
    const response = await this.request("GET", path, { signal: options.signal });
    const data = await readJson(response);
    if (!response.ok) {
      throw new ApiError(response.status, data);
    }
    return /** @type {EventPage} */ (data);
  }

  /**
   * A turn's events as they happen, until it finishes (its `finished` event is the last one yielded).
   * Server-Sent Events where the server streams them, else long polls of `wait` seconds; after a
   * dropped connection it asks again from the last event it yielded. Leaving the loop (break, or
   * `signal`) stops it.
   * @param {string} turnId
   * @param {{after?: number, wait?: number, stream?: boolean, signal?: AbortSignal}} [options]
   *   after: the last seq already seen; stream: false asks for long polls only
   * @returns {AsyncGenerator<TurnEvent>}
   */
  async *follow(turnId, options = {}) {
    const signal = options.signal;
    const wait = options.wait ?? WAIT_SECONDS;
    const streams = options.stream !== false;
    let after = options.after ?? 0;
    let failures = 0;
    let plain = !streams; // a stream that ended before the turn did is followed by one long poll
    while (!signal?.aborted) {
      const accept = plain ? "application/json" : `${STREAM}, application/json;q=0.5`;
      const path = `/turns/${encodeURIComponent(turnId)}/events?after=${after}&wait=${wait}`;
      /** @type {Response} */
      let response;
      try {
        response = await this.request("GET", path, { headers: { Accept: accept }, signal });
      } catch (error) {
        if (signal?.aborted || ++failures > RETRIES) {
          if (signal?.aborted) return;
          throw error;
        }
        await sleep(500 * 2 ** failures, signal);
        continue;
      }
      if (response.status === 429) {
        await readJson(response);
        await sleep(1000 * (Number(response.headers.get("Retry-After")) || 1), signal);
        continue;
      }
      if (!response.ok) {
        throw new ApiError(response.status, await readJson(response));
      }
      if ((response.headers.get("Content-Type") ?? "").startsWith(STREAM) && response.body) {
        try {
          for await (const frame of serverSentEvents(response.body)) {
            if (frame.event === "error") {
              throw new ApiError(502, frame.data);
            }
            failures = 0;
            after = Math.max(after, frame.data.seq);
            yield frame.data;
            if (frame.data.type === "finished") {
              return;
            }
          }
        } catch (error) {
          if (signal?.aborted) return;
          if (error instanceof ApiError || ++failures > RETRIES) {
            throw error;
          }
          await sleep(500 * 2 ** failures, signal);
        }
        plain = true; // the stream ended before the turn did: a long poll next (it says if it finished)
        continue;
      }
      const page = /** @type {EventPage} */ (await readJson(response));
      failures = 0;
      plain = !streams;
      for (const event of page.events ?? []) {
        after = Math.max(after, event.seq);
        yield event;
        if (event.type === "finished") {
          return;
        }
      }
      after = Math.max(after, page.next ?? after);
      if (page.finished) {
        return;
      }
    }
  }

  /**
   * Approve a pending call, as it is or with edited arguments (checked against the tool's schema: a
   * 400 ApiError leaves the item open). `argsHash`: the one you were shown (409 if the call is another).
   * @param {string} pendingId
   * @param {{editedArgs?: Record<string, unknown>, comment?: string, argsHash?: string, scope?: "turn", wait?: number}} [options]
   *   wait: up to that many seconds for the resumed turn's outcome (answers a TurnReply instead)
   * @returns {Promise<Resolution | TurnReply>}
   */
  approve(pendingId, options = {}) {
    const { wait, ...rest } = options;
    return this.resolve(pendingId, { decision: "approve", ...rest }, wait);
  }

  /**
   * Deny a pending call (the comment reaches the model with the denial).
   * @param {string} pendingId
   * @param {{comment?: string, argsHash?: string, wait?: number}} [options]
   * @returns {Promise<Resolution | TurnReply>}
   */
  deny(pendingId, options = {}) {
    const { wait, ...rest } = options;
    return this.resolve(pendingId, { decision: "deny", ...rest }, wait);
  }

  /**
   * @param {string} pendingId
   * @param {Record<string, unknown>} body
   * @param {number} [wait]
   * @returns {Promise<Resolution | TurnReply>}
   */
  resolve(pendingId, body, wait) {
    const query = wait ? `?wait=${wait}` : "";
    const clean = Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));
    return this.call("POST", `/pending-approvals/${encodeURIComponent(pendingId)}/resolve${query}`, clean);
  }

  /**
   * Answer a question the agent asked.
   * @param {string} pendingId
   * @param {string} answer
   * @param {{wait?: number}} [options]
   * @returns {Promise<Resolution | TurnReply>}
   */
  answer(pendingId, answer, options = {}) {
    const query = options.wait ? `?wait=${options.wait}` : "";
    return this.call("POST", `/pending-questions/${encodeURIComponent(pendingId)}/answer${query}`, { answer });
  }

  /**
   * Stop a turn: nothing further runs; what already ran stays done (the answer's `note` says so).
   * @param {string} turnId
   * @param {{idempotencyKey?: string}} [options]
   * @returns {Promise<Cancelled>}
   */
  cancel(turnId, options = {}) {
    const headers = options.idempotencyKey ? { "Idempotency-Key": options.idempotencyKey } : undefined;
    return this.call("POST", `/turns/${encodeURIComponent(turnId)}/cancel`, undefined, headers);
  }

  /**
   * A session's durable history (blocks in the Messages API's shape).
   * @param {string} sessionId
   * @param {{tenant?: string | null}} [options]
   * @returns {Promise<Session>}
   */
  getSession(sessionId, options = {}) {
    const query = options.tenant ? `?tenant=${encodeURIComponent(options.tenant)}` : "";
    return this.call("GET", `/sessions/${encodeURIComponent(sessionId)}${query}`);
  }

  /**
   * A turn: status, pending items, audit trail.
   * @param {string} turnId
   * @returns {Promise<Record<string, any>>}
   */
  getTurn(turnId) {
    return this.call("GET", `/turns/${encodeURIComponent(turnId)}`);
  }
}
