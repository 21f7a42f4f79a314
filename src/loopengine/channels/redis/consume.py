"""A worker for the ``redis`` channel: pop each entry, decide it, resolve it through the HTTP API.

    from loopengine.channels.redis.consume import RedisQueue, Verdict, consume_once, connect
    from loopengine.channels.redis.resolve import ApiResolver, basic_auth

    secret = os.environ["LOOPENGINE_REDIS_SECRET"]      # the notifier's secret_env: entries are signed
    queue = RedisQueue(connect(os.environ["LOOPENGINE_REDIS_URL"]), "loopengine:approvals", secret=secret)
    api = ApiResolver("http://127.0.0.1:8787", basic_auth(os.environ["LOOPENGINE_ADMIN_AUTH"]))

    def decide(entry):                       # your policy, a UI, a ticket system ...
        if entry.event == "question":
            return Verdict.reply("refund")
        if entry.body["tool"] == "issue_refund" and entry.body["args"]["amount"] <= 250:
            return Verdict.approve(comment="within the refund limit")
        return None                          # leave it to a human (GET /pending-approvals)

    while True:
        consume_once(queue, api, decide, timeout=5)

Or :func:`run` (the same loop, with a stop flag and backoff), or from a terminal, deciding each
item by hand: ``python -m loopengine.channels.redis.consume --api http://127.0.0.1:8787`` (reads
``LOOPENGINE_REDIS_URL``, ``LOOPENGINE_REDIS_SECRET`` and ``LOOPENGINE_API_AUTH`` = ``user:password``).

**What one step does** (:func:`consume_once`): pop one entry (``BLPOP`` on a list; on a stream,
``XREADGROUP`` in the consumer group, this consumer's unacknowledged entries first); verify its
signature (:mod:`loopengine.channels.redis.signed`) and drop it, unread, as ``forged`` when it is
unsigned, signed with another secret, altered, or signed more than ``tolerance`` seconds (a week)
away from now; drop it when it is unreadable, announces no pending item (``run_start`` /
``run_finish``) or is a duplicate;
else ask ``decide`` and send its verdict (:class:`~loopengine.channels.redis.resolve.ApiResolver`);
then mark its ``eventId`` seen and acknowledge it.

**Duplicates.** Delivery is at least once (an entry can arrive twice, with the same ``eventId``).
After an entry is handled its ``eventId`` is written to ``<key>:seen:<eventId>`` (``SET ... EX``,
a week by default), so every worker on the key skips a copy that arrives later. Two workers
handling copies at the same moment is harmless too: the second resolve answers
``{"alreadyResolved": true}`` and runs nothing.

**Failures.** When the API cannot be reached or answers 401, 429 or 5xx, the entry is kept (pushed
back to the list's tail; left unacknowledged on the stream, where the next pop reads it again)
and :class:`~loopengine.channels.redis.resolve.ResolveError` is raised. Any other refusal (400, 403,
404, 409) will not change on a retry: the entry is dropped and reported as ``refused``; its item
stays open on the server. A list pop is destructive: a worker killed between the pop and the
resolve loses that entry (never the item, still listed by ``GET /pending-approvals``); a stream
keeps it until acknowledged.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from loopengine.channels.redis.resolve import ApiResolver, Entry, ResolveError, Verdict, basic_auth
from loopengine.channels.redis.send import DEFAULT_KEY, Mode
from loopengine.channels.redis.signed import opened
from loopengine.channels.signing import WebhookVerificationError

SEEN_TTL_SECONDS = 7 * 24 * 3600
MAX_BLOCK_SECONDS = 25.0
"""The longest a pop blocks; :func:`connect`'s socket timeout is a little longer."""
Outcome = Literal[
    "resolved", "already_resolved", "left", "refused", "duplicate", "not_pending", "malformed", "forged"
]
Decide = Callable[[Entry], Verdict | None]

__all__ = ["ApiResolver", "Entry", "Handled", "RedisQueue", "ResolveError", "Verdict", "consume_once", "run"]


def connect(url: str) -> Any:
    """A ``redis.Redis`` for a worker: 5 s to connect, reads long enough for a blocking pop."""
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=MAX_BLOCK_SECONDS + 5)


class RedisQueue:
    """The worker's side of one key: pop entries, remember what was handled, keep what failed."""

    def __init__(
        self,
        client: Any,
        key: str = DEFAULT_KEY,
        *,
        secret: str,
        mode: Mode = "list",
        group: str = "loopengine",
        consumer: str = "worker-1",
        seen_ttl: int = SEEN_TTL_SECONDS,
        tolerance: int | None = None,
    ) -> None:
        """Read ``key`` (a list, or a stream in consumer group ``group`` as ``consumer``) with ``client``.

        ``client`` is a ``redis.Redis`` whose socket timeout is longer than the pops (:func:`connect`).
        ``secret`` is the notifier's signing secret (its ``secret_env``); an entry signed more than
        ``tolerance`` seconds from now (default ``seen_ttl``: what is remembered as handled) is refused.
        """
        if mode not in ("list", "stream"):
            raise ValueError("mode is list or stream")
        if not secret:
            raise ValueError("the consumer needs the notifier's signing secret: entries are signed")
        self._secret = secret
        self.tolerance = seen_ttl if tolerance is None else tolerance
        self.client, self.key, self.mode = client, key, mode
        self.group, self.consumer, self.seen_ttl = group, consumer, seen_ttl
        self._group_ready = False

    def pop(self, timeout: float) -> Entry | None:
        """The next entry, waiting up to ``timeout`` seconds (at most 25); None when there is none."""
        block = min(max(timeout, 0.001), MAX_BLOCK_SECONDS)
        if self.mode == "list":
            popped = self.client.blpop([self.key], timeout=block)
            return None if popped is None else self._verified(popped[1])
        self._ensure_group()
        for start, wait in (("0", None), (">", max(1, int(block * 1000)))):
            found = self.client.xreadgroup(self.group, self.consumer, {self.key: start}, count=1, block=wait)
            for _stream, messages in found or ():
                for stream_id, fields in messages:
                    ident = stream_id.decode() if isinstance(stream_id, bytes) else str(stream_id)
                    fields = fields or {}
                    return self._verified(fields.get(b"body", b""), ident, fields.get(b"signature", b""))
        return None

    def _verified(self, raw: bytes, stream_id: str | None = None, signature: bytes | None = None) -> Entry:
        """The entry, read only when its signature verifies; else a ``forged`` entry that decides nothing."""
        try:
            body = opened(self._secret, raw, signature, tolerance=self.tolerance)
        except WebhookVerificationError as exc:
            return Entry({}, raw, stream_id, f"refused: {exc.reason}: {exc}", forged=True)
        return replace(Entry.parse(body, stream_id), raw=raw)

    def _ensure_group(self) -> None:
        """Create the consumer group (reading from the stream's start) unless it exists."""
        if self._group_ready:
            return
        from redis.exceptions import ResponseError

        try:
            self.client.xgroup_create(self.key, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _seen_key(self, entry: Entry) -> str:
        return f"{self.key}:seen:{entry.event_id}"

    def seen(self, entry: Entry) -> bool:
        """Whether an entry with this ``eventId`` was handled already (by any worker)."""
        return bool(entry.event_id) and bool(self.client.exists(self._seen_key(entry)))

    def done(self, entry: Entry) -> None:
        """Remember ``entry``'s ``eventId`` as handled, and acknowledge it on a stream."""
        if entry.event_id:
            self.client.set(self._seen_key(entry), b"1", ex=self.seen_ttl)
        if self.mode == "stream" and entry.stream_id:
            self.client.xack(self.key, self.group, entry.stream_id)

    def keep(self, entry: Entry) -> None:
        """Keep ``entry`` for a later try: back to the list's tail (a stream keeps it unacknowledged)."""
        if self.mode == "list":
            self.client.rpush(self.key, entry.raw)


@dataclass(frozen=True)
class Handled:
    """What became of one popped entry: the outcome and, when the API answered, its status and JSON."""

    entry: Entry
    outcome: Outcome
    status: int | None = None
    answer: Any = None


def consume_once(queue: RedisQueue, api: ApiResolver, decide: Decide, timeout: float = 5.0) -> Handled | None:
    """Pop one entry and handle it (see the module docstring); None when nothing arrived in time.

    Raises :class:`ResolveError` when the API could not take the verdict for a reason a retry may
    fix (the entry is kept), and whatever ``decide`` raises (the entry is kept too).
    """
    entry = queue.pop(timeout)
    if entry is None:
        return None
    if entry.problem is not None or not entry.pending_id or queue.seen(entry):
        queue.done(entry)
        skipped: Outcome = (
            ("forged" if entry.forged else "malformed")
            if entry.problem
            else "not_pending"
            if not entry.pending_id
            else "duplicate"
        )
        return Handled(entry, skipped)
    try:
        verdict = decide(entry)
        if verdict is None:
            queue.done(entry)
            return Handled(entry, "left")
        status, answer = api.resolve(entry, verdict)
    except ResolveError as exc:
        if exc.retryable:
            queue.keep(entry)
            raise
        queue.done(entry)
        return Handled(entry, "refused", exc.status, exc.body if exc.body is not None else str(exc))
    except BaseException:
        queue.keep(entry)
        raise
    queue.done(entry)
    return Handled(entry, "already_resolved" if answer.get("alreadyResolved") else "resolved", status, answer)


def run(
    queue: RedisQueue,
    api: ApiResolver,
    decide: Decide,
    *,
    stop: threading.Event | None = None,
    report: Callable[[Handled | ResolveError], None] | None = None,
    timeout: float = 5.0,
) -> None:
    """Handle entries until ``stop`` is set; a retryable failure waits (1 s, doubling to 60 s).

    A 401 stops the worker (raised): its credentials are wrong, and every entry would fail.
    ``report`` sees each :class:`Handled` and each retryable error.
    """
    stop = stop or threading.Event()
    delay = 1.0
    while not stop.is_set():
        try:
            handled = consume_once(queue, api, decide, timeout)
        except ResolveError as exc:
            if exc.status == 401:
                raise
            if report:
                report(exc)
            stop.wait(delay)
            delay = min(delay * 2, 60.0)
            continue
        delay = 1.0
        if handled is not None and report:
            report(handled)


def ask_on_terminal(entry: Entry) -> Verdict | None:
    """A ``decide`` for a person at a terminal: show the item, read approve / deny / skip or the answer."""
    body = entry.body
    print(
        f"\n{body.get('agent')} [{body.get('tenant') or '-'}] turn {body.get('turnId')}: {body.get('reason')}"
    )
    if entry.event == "question":
        print(f"  asks: {body.get('question')}  options: {json.dumps(body.get('options'))}")
        answer = input("  answer (empty: leave it): ").strip()
        return Verdict.reply(answer) if answer else None
    print(f"  wants to call {body.get('tool')} with {json.dumps(body.get('args'), indent=2)}")
    choice = input("  [a]pprove, [d]eny, anything else leaves it: ").strip().lower()
    if choice in ("a", "approve"):
        return Verdict.approve()
    if choice in ("d", "deny"):
        return Verdict.deny(input("  comment (optional): ").strip() or None)
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m loopengine.channels.redis.consume``: decide each item by hand at a terminal."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m loopengine.channels.redis.consume", description=main.__doc__
    )
    parser.add_argument(
        "--api", default="http://127.0.0.1:8787", help="loopengine's API (default %(default)s)"
    )
    parser.add_argument("--key", default=DEFAULT_KEY, help="the list or stream (default %(default)s)")
    parser.add_argument("--mode", choices=("list", "stream"), default="list")
    parser.add_argument("--once", action="store_true", help="handle one entry (or wait 5 s), then exit")
    args = parser.parse_args(argv)
    url, auth = os.environ.get("LOOPENGINE_REDIS_URL", ""), os.environ.get("LOOPENGINE_API_AUTH", "")
    secret = os.environ.get("LOOPENGINE_REDIS_SECRET", "")
    if not url or ":" not in auth or not secret:
        print(
            "set LOOPENGINE_REDIS_URL, LOOPENGINE_REDIS_SECRET (the notifier's signing secret) and "
            "LOOPENGINE_API_AUTH (user:password)",
            file=sys.stderr,
        )
        return 2
    queue = RedisQueue(connect(url), args.key, mode=args.mode, secret=secret)
    api = ApiResolver(args.api, basic_auth(auth), wait=10)

    def show(what: Handled | ResolveError) -> None:
        if isinstance(what, ResolveError):
            print(f"  not taken, kept for later: {what}", file=sys.stderr)
        else:
            print(f"  {what.outcome}: {json.dumps(what.answer) if what.answer is not None else ''}")

    if args.once:
        try:
            handled = consume_once(queue, api, ask_on_terminal, timeout=5)
        except ResolveError as exc:
            show(exc)
            return 1
        if handled is not None:
            show(handled)
        return 0
    try:
        run(queue, api, ask_on_terminal, report=show)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
