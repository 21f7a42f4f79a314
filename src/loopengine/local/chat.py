"""``loopengine chat AGENT``: a terminal conversation on the live channel.

Each line you type is sent as a live message (``"live": true``, answered at once with the turn's
id); the chat then follows the turn's events (``GET /turns/{turnId}/events``: Server-Sent Events
where the server streams, else long-polled), prints the model's text as it streams (its
``text:delta`` pieces, then the rest of the whole message once it is recorded) and
offers each pending item inline: approve, deny (with a comment), edit the arguments (checked by
the server against the tool's schema: a 400 shows why and asks again) or answer a question. A
chained pause is offered the same way. Decisions made here are recorded with channel ``live``.

Walking away (Ctrl-C, end of input, or nobody answering within the wait) leaves the items pending
for the other channels (the agent's notifiers, ``GET /pending-approvals``) and prints how to
resolve them later with curl. A server that is not answering yet (``loopengine dev`` starting) is
waited for up to ``--wait-server`` seconds (30 by default).

The HTTP side is :class:`loopengine.client.Client` (``channel="live"``: every request declares
``X-Loopengine-Channel: live``), the same client Python callers use.
"""

from __future__ import annotations

import json
import select
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TextIO

from loopengine.client import ApiError, Client, Resolution, Unreachable
from loopengine.domain.base.jsontypes import JsonDict

SERVER_WAIT_SECONDS = 30.0
"""How long the chat waits for a server that does not answer yet (``loopengine dev`` starting)."""


class WalkedAway(Exception):
    """The user left (Ctrl-C, end of input or no answer in time) while items were pending."""


class Streamed:
    """The model text printed so far for one model call (its ``text:delta`` pieces)."""

    def __init__(self) -> None:
        self.call: str | None = None
        self.text = ""

    def piece(self, event: JsonDict) -> str | None:
        """What to print for one ``text:delta`` (``None``: nothing new); a new call starts a line."""
        call, offset, text = event.get("call"), event.get("offset"), event.get("text")
        if not isinstance(text, str) or not isinstance(offset, int):
            return None
        start = ""
        if call != self.call:
            start = ("\n" if self.text else "") + "agent> "
            self.call, self.text = str(call), ""
        if offset > len(self.text):  # a piece we never got: say so rather than glue text together
            start += " … "
        elif offset + len(text) <= len(self.text):
            return None
        new = text[max(0, len(self.text) - offset) :] if offset <= len(self.text) else text
        self.text = self.text[:offset] + text if offset <= len(self.text) else self.text + text
        return start + new

    def finish(self, whole: str | None) -> str | None:
        """Close the streamed line with the rest of ``whole`` (``None``: print ``whole`` anew)."""
        printed, self.call, self.text = self.text, None, ""
        if printed and whole is not None and whole.startswith(printed):
            return whole[len(printed) :] + "\n"
        if printed:
            return "\n" if whole is None else "\n" + f"agent> {whole}\n"
        return None


@dataclass
class Chat:
    """One terminal conversation with one agent (printing to ``out``, reading ``inp``)."""

    client: Client
    agent: str
    session_id: str | None = None
    live_wait: float | None = None
    out: TextIO = field(default_factory=lambda: sys.stdout)
    inp: TextIO = field(default_factory=lambda: sys.stdin)
    mine: set[str] = field(default_factory=set)
    streamed: Streamed = field(default_factory=Streamed)
    auth_hint: str | None = None
    """How the printed curl lines authenticate (never the password itself)."""

    def say(self, text: str) -> None:
        """Print one line."""
        self.out.write(text + "\n")
        self.out.flush()

    def ask(self, prompt: str, timeout: float | None = None) -> str:
        """Read one line; WalkedAway at end of input or when ``timeout`` seconds pass."""
        self.out.write(prompt)
        self.out.flush()
        if timeout is not None:
            ready, _, _ = select.select([self.inp], [], [], max(0.0, timeout))
            if not ready:
                self.say("")
                raise WalkedAway("no answer in time")
        line = self.inp.readline()
        if not line:
            raise WalkedAway("end of input")
        return line.rstrip("\n")

    def run(self) -> int:
        """The conversation loop; the exit status."""
        self.say(f"Chatting with {self.agent} at {self.client.base} (live channel).")
        self.say("Type a message and press Enter; Ctrl-C or Ctrl-D leaves.")
        while True:
            try:
                text = self.ask("you> ").strip()
            except (WalkedAway, KeyboardInterrupt):
                self.say("bye")
                return 0
            if not text:
                continue
            try:
                status = self.send(text)
            except Unreachable as exc:
                self.say(f"loopengine chat: {exc}")
                return 2
            if status is not None:
                return status

    def send(self, text: str) -> int | None:
        """Send one message and follow its turn; an exit status when the chat should end."""
        try:
            turn = self.client.send_message(self.agent, text, session_id=self.session_id, live=True)
        except ApiError as exc:
            if exc.status == 401:
                hint = "pass --user/--password or set LOOPENGINE_CHAT_AUTH"
                self.say(f"loopengine chat: credentials rejected; {hint}")
                return 2
            if exc.status == 404 and "turnId" not in exc.body:
                self.say(f"loopengine chat: {exc}")
                return 2
            self.say(f"  ! {exc}")
            return None
        self.session_id = turn.session_id or self.session_id
        try:
            self.follow(turn.turn_id)
        except WalkedAway:
            return 0
        except KeyboardInterrupt:
            see = self.curl("GET", f"/turns/{turn.turn_id}")
            self.say(f"\nLeft turn {turn.turn_id} to run on; see it with: {see}")
            return 0
        return None

    def follow(self, turn_id: str) -> None:
        """Show the turn's events until it finishes, offering pending items inline.

        While the turn works its events stream (model text as it arrives); once it pauses they are
        read with quick polls between the questions put to the user.
        """
        after, last_text, polling = 0, None, False
        open_items: dict[str, JsonDict] = {}
        while True:
            if not open_items and not polling:
                try:
                    after, last_text, polling, done = self._stream(turn_id, after, open_items, last_text)
                except ApiError as exc:
                    self.say(f"  ! cannot follow turn {turn_id}: {exc}")
                    return
                if done:
                    return
                continue
            try:
                page = self.client.events(turn_id, after, 0)
            except ApiError as exc:
                self.say(f"  ! cannot follow turn {turn_id}: {exc}")
                return
            polling = False
            for event in page.events:
                last_text = self.show(event.data, open_items, last_text)
            after = page.next
            if page.finished:
                return
            if open_items and not page.events:
                pending_id, item = next(iter(open_items.items()))
                try:
                    self.offer(item)
                except (WalkedAway, KeyboardInterrupt):
                    self.leave(turn_id, list(open_items.values()))
                    raise WalkedAway("left the items pending") from None
                open_items.pop(pending_id, None)

    def _stream(
        self, turn_id: str, after: int, open_items: dict[str, JsonDict], last_text: str | None
    ) -> tuple[int, str | None, bool, bool]:
        """Show the turn's events as they come (:meth:`Client.follow`) until it pauses or finishes.

        Returns the cursor, the model's last text, whether to poll now (a pause: its items are read
        with a poll) and whether the turn finished.
        """
        for event in self.client.follow(turn_id, after):
            after = max(after, event.seq)
            last_text = self.show(event.data, open_items, last_text)
            if event.type == "paused":
                return after, last_text, True, False
        return after, last_text, False, True

    def write(self, text: str) -> None:
        """Print ``text`` as it is (no newline added)."""
        self.out.write(text)
        self.out.flush()

    def show(self, event: JsonDict, open_items: dict[str, JsonDict], last_text: str | None) -> str | None:
        """Print one event; track the open items; the model's last text."""
        kind = event.get("type")
        if kind == "text:delta":
            shown = self.streamed.piece(event)
            if shown:
                self.write(shown)
            return last_text
        if kind in ("model_response", "model_call_abandoned", "model_error"):
            whole = event.get("text") if kind == "model_response" else None
            rest = self.streamed.finish(whole or None)
            if rest is not None:
                self.write(rest)
            elif whole:
                self.say(f"agent> {whole}")
            return str(whole) if whole else last_text
        if kind == "tool_outcome":
            self.say(f"  [tool] {event.get('tool')}: {event.get('outcome')}")
        elif kind in ("approval:pending", "question:pending"):
            open_items[str(event["pendingId"])] = event
        elif kind in ("decided", "expired") and event.get("pendingId") in open_items:
            open_items.pop(str(event["pendingId"]), None)
            if event.get("pendingId") not in self.mine:
                by = f" by {event.get('decidedBy')}" + (
                    f" ({event['channel']})" if event.get("channel") else ""
                )
                self.say(f"  [{kind}] {event.get('pendingId')}: {event.get('decision', 'expired')}{by}")
        elif kind == "finished":
            text, stop = event.get("text"), event.get("stopReason")
            if text and text != last_text:
                self.say(f"agent> {text}")
            if stop != "end_turn":
                self.say(f"  (turn finished: {stop})")
        return last_text

    def offer(self, item: JsonDict) -> None:
        """Offer one pending item until it is decided here (or was decided elsewhere)."""
        timeout = self._timeout(item)
        if item.get("type") == "question:pending":
            self.say(f"  ? the agent asks: {item.get('question')}")
            if item.get("options"):
                self.say(f"    options: {', '.join(str(o) for o in item['options'])}")
            while True:
                answer = self.ask("  answer> ", timeout).strip()
                if answer and self._done(item, partial(self.client.answer, item["pendingId"], answer)):
                    return
        self.say(f"  ? {item.get('tool')} needs approval: {json.dumps(item.get('args'))}")
        self.say(f"    reason: {item.get('reason')}")
        pending_id, args_hash = str(item["pendingId"]), item.get("argsHash")
        while True:
            choice = self.ask("  [a]pprove, [d]eny, [e]dit arguments > ", timeout).strip().lower()
            decide: Callable[[], Resolution] | None = None
            if choice in ("a", "approve"):
                decide = partial(self.client.approve, pending_id, args_hash=args_hash)
            elif choice in ("d", "deny"):
                comment = self.ask("  comment (optional)> ", timeout).strip() or None
                decide = partial(self.client.deny, pending_id, comment=comment, args_hash=args_hash)
            elif choice in ("e", "edit"):
                if self._edit(item, timeout):
                    return
            else:
                self.say("    please type a, d or e")
            if decide is not None and self._done(item, decide):
                return

    def _edit(self, item: JsonDict, timeout: float | None) -> bool:
        """Approve with edited arguments, asking again while the server rejects them; True if decided."""
        self.say(f"    current arguments: {json.dumps(item.get('args'))}")
        while True:
            raw = self.ask("  new arguments as JSON (empty: back)> ", timeout).strip()
            if not raw:
                return False
            try:
                edited = json.loads(raw)
            except ValueError as exc:
                self.say(f"    not JSON: {exc}")
                continue
            if not isinstance(edited, dict):
                self.say("    rejected: the arguments must be a JSON object")
                continue
            try:
                decided = self.client.approve(
                    str(item["pendingId"]), edited_args=edited, args_hash=item.get("argsHash")
                )
            except ApiError as exc:
                if exc.status == 400:
                    self.say(f"    rejected: {exc}")
                    continue
                self.say(f"    ! {exc}")
                return exc.status == 404
            return self._report(item, decided)

    def _done(self, item: JsonDict, decide: Callable[[], Resolution]) -> bool:
        """Make a decision and report its answer; True when the item is no longer ours to decide."""
        try:
            answer = decide()
        except ApiError as exc:
            self.say(f"    ! {exc}")
            return exc.status == 404
        return self._report(item, answer)

    def _report(self, item: JsonDict, answer: Resolution) -> bool:
        """Say what a decision's answer was; True (the item is no longer ours to decide)."""
        self.mine.add(str(item["pendingId"]))
        if answer.already_resolved:
            self.say("    (already decided elsewhere)")
        elif answer.outstanding:
            self.say(f"    recorded; {answer.outstanding} more waiting")
        else:
            self.say("    recorded")
        return True

    def _timeout(self, item: JsonDict) -> float | None:
        if self.live_wait is not None:
            return self.live_wait
        until, at = item.get("liveUntil"), item.get("at")
        if isinstance(until, int | float) and isinstance(at, int | float):
            return max(1.0, until - at)
        return None

    def leave(self, turn_id: str, items: list[JsonDict]) -> None:
        """Say what was left pending and how to resolve it later."""
        self.say(f"\nLeft {len(items)} item(s) of turn {turn_id} pending for the other channels:")
        for item in items:
            if item.get("type") == "question:pending":
                path, body = f"/pending-questions/{item['pendingId']}/answer", '{"answer":"..."}'
            else:
                path, body = f"/pending-approvals/{item['pendingId']}/resolve", '{"decision":"approve"}'
            self.say(f"  {item.get('tool')}: {self.curl('POST', path, body)}")
        self.say(f"  (all open items: {self.curl('GET', '/pending-approvals')})")

    def curl(self, method: str, path: str, body: str | None = None) -> str:
        """A curl line for ``method path`` against this server."""
        auth = f" -u {self.auth_hint}" if self.auth_hint else ""
        data = f" -H 'content-type: application/json' -d '{body}'" if body else ""
        verb = "" if method == "GET" else f" -X {method}"
        return f"curl -s{verb}{auth} {self.client.base}{path}{data}"


def main(
    agent: str,
    url: str,
    auth: str | None,
    session_id: str | None,
    live_wait: float | None,
    auth_hint: str | None = None,
    server_wait: float = SERVER_WAIT_SECONDS,
) -> int:
    """``loopengine chat``: wait for the server to answer (up to ``server_wait`` s), then converse."""
    # Ctrl-C leaves the chat even when it was started with SIGINT ignored (a background job of a
    # script, nohup): Python then installs no handler, and Ctrl-C would do nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with Client(url, auth or None, channel="live") as client:
        waiting = f"waiting for loopengine dev at {client.base} (up to {server_wait:g} s) ..."
        try:
            client.wait_until_up(server_wait, lambda: print(waiting, flush=True))
        except Unreachable as exc:
            print(f"loopengine chat: {exc} (is `loopengine dev` running?)", file=sys.stderr)
            return 2
        chat = Chat(client, agent, session_id, live_wait)
        chat.auth_hint = auth_hint
        return chat.run()
