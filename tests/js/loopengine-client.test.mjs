// The client module (GET /chat/static/loopengine-client.js) under node, against a real `loopengine dev`.
// Run by tests/test_clients.py (`node --test`), which starts the server and passes where it is:
// LOOPENGINE_URL, LOOPENGINE_AUTH (the operator), LOOPENGINE_OTHER_AUTH (a user of another tenant).
// The module is fetched from the server and imported as it is served.
import assert from "node:assert/strict";
import { before, test } from "node:test";

const BASE = process.env.LOOPENGINE_URL;
const ADMIN = process.env.LOOPENGINE_AUTH;
const OTHER = process.env.LOOPENGINE_OTHER_AUTH;
const REFUND = "Order A-1001 arrived broken, please refund it.";
let Client;
let ApiError;

before(async () => {
  const auth = "Basic " + Buffer.from(ADMIN).toString("base64");
  const response = await fetch(`${BASE}/chat/static/loopengine-client.js`, { headers: { Authorization: auth } });
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type"), /^text\/javascript/);
  const source = await response.text();
  ({ Client, ApiError } = await import("data:text/javascript;base64," + Buffer.from(source).toString("base64")));
});

/** A stream's body that ends after its first frame (the connection dropped). */
function firstFrameOnly(body) {
  const reader = body.getReader();
  let text = "";
  return new ReadableStream({
    async pull(controller) {
      const chunk = await reader.read();
      if (chunk.done) return controller.close();
      text += new TextDecoder().decode(chunk.value);
      const end = text.indexOf("\n\n");
      if (end < 0) return controller.enqueue(chunk.value);
      controller.enqueue(new TextEncoder().encode(text.slice(0, end + 2)));
      reader.cancel();
      controller.close();
    },
  });
}

/** A client whose fetch records the content type of every answer of the events route (and, with
 * `drops`, cuts that many event streams after their first frame). */
function recording(options = {}, drops = 0) {
  const types = [];
  const client = new Client({
    baseUrl: BASE,
    basic: ADMIN,
    ...options,
    fetch: async (url, init) => {
      const response = await fetch(url, init);
      if (!String(url).includes("/events")) return response;
      const type = response.headers.get("content-type");
      types.push(type);
      if (drops > 0 && type.startsWith("text/event-stream")) {
        drops -= 1;
        return new Response(firstFrameOnly(response.body), { status: 200, headers: response.headers });
      }
      return response;
    },
  });
  return { client, types };
}

/** Follow until an event of `type` (returned) or the end; every event seen goes into `seen`. */
async function until(client, turnId, after, type, seen, options = {}) {
  for await (const event of client.follow(turnId, { after, ...options })) {
    seen.push(event);
    if (event.type === type) return event;
  }
  return null;
}

test("a refund approved, its chained email approved, over Server-Sent Events, resuming from each cursor", async () => {
  const { client, types } = recording({ channel: "chat" }, 2); // two streams drop after one event
  const turn = await client.sendMessage("customer-service", REFUND, { live: true });
  assert.equal(turn.status, "running");
  assert.match(turn.sessionId, /^ses_/);
  const seen = [];
  const refund = await until(client, turn.turnId, 0, "approval:pending", seen);
  assert.equal(refund.tool, "issue_refund");
  assert.deepEqual(refund.args, { order_id: "A-1001", amount: 212, reason: "arrived broken" });
  const recorded = await client.approve(refund.pendingId, { argsHash: refund.argsHash });
  assert.deepEqual([recorded.resolved, recorded.outstanding, recorded.status], [true, 0, "resuming"]);
  const email = await until(client, turn.turnId, refund.seq, "approval:pending", seen);
  assert.equal(email.tool, "send_email");
  await client.approve(email.pendingId, { argsHash: email.argsHash, comment: "fine" });
  const finished = await until(client, turn.turnId, email.seq, "finished", seen);
  assert.equal(finished.stopReason, "end_turn");
  assert.match(finished.text, /^Done: order A-1001 was refunded/);
  // every event once, in order: each follow resumed where the last one stopped
  assert.deepEqual(seen.map((e) => e.seq), Array.from(seen, (_e, i) => i + 1));
  // after each drop: one long poll (a stream of a finished turn would say nothing), then streams again
  const polls = types.filter((t) => t.startsWith("application/json")).length;
  assert.ok(polls === 2 && types.length - polls >= 4 && types[0].startsWith("text/event-stream"), String(types));
  // the decisions are the caller's, with the label it declared
  const audit = (await client.getTurn(turn.turnId)).audit.filter((e) => e.type === "decided");
  assert.deepEqual(
    audit.map((e) => [e.decidedBy, e.channel, e.declaredChannel, e.comment]),
    [["user:admin", "api", "chat", null], ["user:admin", "api", "chat", "fine"]],
  );
  // the history, and a late click on a decided item
  const session = await client.getSession(turn.sessionId);
  assert.equal(session.messages[0].content[0].text, REFUND);
  assert.equal(session.messages.at(-1).content[0].text, finished.text);
  assert.deepEqual(await client.approve(refund.pendingId), { alreadyResolved: true });
});

test("long polls where no stream is asked for; a bad edit refused; a denial with a comment", async () => {
  const { client, types } = recording();
  const turn = await client.sendMessage("customer-service", REFUND);
  const seen = [];
  const refund = await until(client, turn.turnId, 0, "approval:pending", seen, { stream: false, wait: 5 });
  await assert.rejects(client.approve(refund.pendingId, { editedArgs: { order_id: "A-1001" } }), (error) => {
    assert.ok(error instanceof ApiError);
    assert.equal(error.status, 400);
    assert.match(error.message, /'amount' is a required property/);
    return true;
  });
  const denied = await client.deny(refund.pendingId, { comment: "ask finance first", argsHash: refund.argsHash });
  assert.deepEqual([denied.status, denied.stopReason], ["finished", "denied"]);
  const finished = await until(client, turn.turnId, refund.seq, "finished", seen, { stream: false });
  assert.equal(finished.stopReason, "denied");
  assert.ok(types.length >= 2 && types.every((t) => t.startsWith("application/json")), String(types));
  // a follow from the end of a finished turn ends at once, with nothing
  const after = [];
  assert.equal(await until(client, turn.turnId, finished.seq, "finished", after), null);
  assert.deepEqual(after, []);
});

test("a question answered, then Stop, which says what it cannot undo", async () => {
  const { client } = recording();
  const turn = await client.sendMessage("customer-service", "hello, something went wrong");
  const seen = [];
  const question = await until(client, turn.turnId, 0, "question:pending", seen);
  assert.equal(question.question, "Which order is this about?");
  await client.answer(question.pendingId, "A-1001");
  const refund = await until(client, turn.turnId, question.seq, "approval:pending", seen);
  const stopped = await client.cancel(turn.turnId);
  assert.equal(stopped.cancelled, true);
  assert.match(stopped.note, /already ran keep their effects/);
  const finished = await until(client, turn.turnId, refund.seq, "finished", seen);
  assert.equal(finished.stopReason, "cancelled");
  assert.deepEqual(await client.approve(refund.pendingId), { alreadyResolved: true });
});

test("another tenant's session and turn are not found; no credentials is 401", async () => {
  const admin = new Client({ baseUrl: BASE, basic: ADMIN });
  const turn = await admin.sendMessage("customer-service", REFUND);
  const other = new Client({ baseUrl: BASE, basic: OTHER });
  for (const call of [() => other.getSession(turn.sessionId), () => other.cancel(turn.turnId)]) {
    await assert.rejects(call(), (error) => error instanceof ApiError && error.status === 404 && error.code === "not_found");
  }
  const iterator = other.follow(turn.turnId);
  await assert.rejects(iterator.next(), (error) => error instanceof ApiError && error.status === 404);
  await assert.rejects(new Client({ baseUrl: BASE }).getTurn(turn.turnId), (error) => error.status === 401);
  assert.throws(() => new Client(), /baseUrl is required/);
});
