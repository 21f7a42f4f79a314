"""``loopengine admin``: find, inspect and repair turns, against the store a deployment writes.

``turns`` lists turns (by status, stop reason, agent, tenant, age), ``show TURN`` prints one whole
(its state, every item it paused on, its calls with their idempotency keys, its audit trail),
``redrive TURN`` invokes its resume as the sweep would, ``expire ITEM`` closes an open item as
nobody's answer, and ``dlq list|redrive`` reads and re-drives the resume function's dead-letter
queue. The store is ``LOOPENGINE_TABLE`` (DynamoDB, with the caller's AWS credentials) or
``LOOPENGINE_DB`` (SQLite). Every action is recorded in the turn's audit as the operator's
(``--as NAME``, else ``LOOPENGINE_OPERATOR``, else the OS user: ``user:<name>``, channel ``admin``).
The actions are :mod:`loopengine.app.operator`'s; docs/operations.md says when to use which.

Output is a table for people and ``--json`` for scripts; errors are one line on stderr (exit 1:
the operation failed or found nothing; 2: the command was wrong).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from loopengine.local import admin_view as view

if TYPE_CHECKING:
    from loopengine.app.operator import Action, Operator
    from loopengine.domain.turns import TurnQuery
    from loopengine.local.admin_dlq import DeadLetterQueue


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``loopengine admin ...`` and its commands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of a table")
    common.add_argument(
        "--as",
        dest="operator",
        default=None,
        metavar="NAME",
        help="who acts, recorded as user:NAME (default: $LOOPENGINE_OPERATOR, else the OS user)",
    )
    runs = argparse.ArgumentParser(add_help=False)
    runs.add_argument(
        "--resume-function",
        default=None,
        metavar="NAME",
        help="invoke this resume function (default: $LOOPENGINE_RESUME_FUNCTION; the stack's "
        "ResumeFunctionName output)",
    )
    runs.add_argument(
        "--inline", action="store_true", help="run the resume in this process (the default on SQLite)"
    )
    admin = sub.add_parser("admin", help="find, inspect and repair turns (docs/operations.md)")
    commands = admin.add_subparsers(dest="admin_command", required=True)
    turns = commands.add_parser("turns", parents=[common], help="list turns, newest first")
    turns.add_argument(
        "--status", choices=view.STATUSES, help="the stored status (ready: waiting for a worker)"
    )
    turns.add_argument("--stop-reason", choices=view.STOP_REASONS, help="why it stopped")
    turns.add_argument("--agent", help="one agent's turns")
    turns.add_argument("--tenant", help="one tenant's turns ('' for the default tenant)")
    turns.add_argument("--since", help="created since: 2h, 30m, 7d ago, or a date/time (ISO 8601, UTC)")
    turns.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    show = commands.add_parser("show", parents=[common], help="a turn: state, items, calls, audit")
    show.add_argument("turn", help="the turnId")
    redrive = commands.add_parser(
        "redrive", parents=[common, runs], help="invoke a turn's resume as the sweep would"
    )
    redrive.add_argument("turn", help="the turnId")
    expire = commands.add_parser(
        "expire", parents=[common, runs], help="close an open item as nobody's answer"
    )
    expire.add_argument("item", help="the pendingId")
    dlq = commands.add_parser("dlq", help="the resume function's dead-letter queue")
    queue = argparse.ArgumentParser(add_help=False)
    queue.add_argument(
        "--queue-url",
        default=None,
        help="the queue (default: $LOOPENGINE_DLQ_URL; the stack's FailureQueueUrl)",
    )
    queue.add_argument("--limit", type=int, default=100, help="at most this many messages (default 100)")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True)
    dlq_commands.add_parser("list", parents=[common, queue], help="the failed invocations, left in the queue")
    again = dlq_commands.add_parser(
        "redrive", parents=[common, queue, runs], help="re-drive each failed resume; delete what is handled"
    )
    again.add_argument("message", nargs="*", help="only these MessageIds (default: every message)")


def main(args: argparse.Namespace, env: Mapping[str, str], out: IO[str] | None = None) -> int:
    """Run one admin command; returns the exit status."""
    from loopengine.domain.base.errors import InvalidInput, LoopengineError, NotFound

    out = out or sys.stdout
    try:
        return _run(args, env, out)
    except (InvalidInput, view.BadArgument) as exc:
        print(f"loopengine admin: {exc}", file=sys.stderr)
        return 2
    except NotFound as exc:
        print(f"loopengine admin: {exc}", file=sys.stderr)
        return 1
    except LoopengineError as exc:
        print(f"loopengine admin: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # an operator's tool answers in one line, never a stack trace
        print(f"loopengine admin: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, env: Mapping[str, str], out: IO[str]) -> int:
    command = args.admin_command if args.admin_command != "dlq" else f"dlq {args.dlq_command}"
    inline = getattr(args, "inline", False)
    function = getattr(args, "resume_function", None) or env.get("LOOPENGINE_RESUME_FUNCTION") or None
    runs = command in ("redrive", "expire", "dlq redrive")
    operator = _operator(env, args.operator, function, inline, runs)
    try:
        if command == "turns":
            return _turns(operator, _query(args, operator.engine.now()), args.json, out)
        if command == "show":
            detail = operator.show(args.turn)
            out.write(
                json.dumps(view.detail_json(detail), indent=2) + "\n" if args.json else view.detail(detail)
            )
            return 0
        if command == "redrive":
            return _report([operator.redrive(args.turn)], args.json, out)
        if command == "expire":
            return _report([operator.expire(args.item)], args.json, out)
        queue = _queue(args, env)
        if command == "dlq list":
            letters = queue.peek(args.limit)
            statuses = {t: view.status_of(operator.engine, t) for t in {x.turn_id for x in letters} if t}
            rows = [view.letter_row(x, statuses) for x in letters]
            out.write(json.dumps({"messages": rows}, indent=2) + "\n" if args.json else view.letters(rows))
            return 0
        return _redrive_queue(operator, queue, args, out)
    finally:
        operator.engine.rt.stores.close()


def _operator(
    env: Mapping[str, str], name: str | None, function: str | None, inline: bool, runs: bool
) -> Operator:
    """The operator's actions on the engine this environment names (its store, agents, invoker)."""
    from loopengine.app.operator import CHANNEL, Operator
    from loopengine.bootstrap import DEFAULT_DB, build_engine
    from loopengine.domain.base.errors import ConfigError
    from loopengine.domain.principals import OPERATOR, Principal

    table = env.get("LOOPENGINE_TABLE")
    db = env.get("LOOPENGINE_DB") or DEFAULT_DB
    if not table and not Path(db).exists():
        raise ConfigError(f"no store at {db}: set LOOPENGINE_DB (SQLite) or LOOPENGINE_TABLE (DynamoDB)")
    if function and inline:
        raise view.BadArgument("--inline runs the resume here; --resume-function invokes it in AWS: pick one")
    if runs and table and not function and not inline:
        raise ConfigError(
            "name the resume function to invoke (--resume-function or LOOPENGINE_RESUME_FUNCTION: the "
            "stack's ResumeFunctionName output), or pass --inline to run the resume in this process"
        )
    invoker = None
    if function:
        from loopengine.aws.lambda_invoker import LambdaInvoker

        invoker = LambdaInvoker(
            function, pin=env.get("LOOPENGINE_PIN_RESUME_VERSION", "true").lower() != "false"
        )
    engine = build_engine(env, invoker=invoker)
    who = name or env.get("LOOPENGINE_OPERATOR") or _os_user()
    return Operator(engine, Principal(who, channel=CHANNEL, kind=OPERATOR))


def _os_user() -> str:
    try:
        return getpass.getuser() or "operator"
    except Exception:  # no login name (a container without one)
        return "operator"


def _query(args: argparse.Namespace, now: float) -> TurnQuery:
    from loopengine.domain.turns import StopReason, TurnQuery, TurnStatus

    if args.limit < 1:
        raise view.BadArgument("--limit must be at least 1")
    return TurnQuery(
        status=TurnStatus(args.status) if args.status else None,
        stop_reason=StopReason(args.stop_reason) if args.stop_reason else None,
        agent=args.agent,
        tenant=args.tenant,
        since=view.since(args.since, now) if args.since else None,
        limit=args.limit,
    )


def _turns(operator: Operator, query: TurnQuery, as_json: bool, out: IO[str]) -> int:
    found = operator.turns(query)
    now = operator.engine.now()
    if as_json:
        out.write(json.dumps({"turns": [view.turn_json(t) for t in found]}, indent=2) + "\n")
    else:
        out.write(view.turns(found, now))
    return 0


def _report(actions: list[Action], as_json: bool, out: IO[str]) -> int:
    if as_json:
        out.write(json.dumps({"actions": [view.action_json(a) for a in actions]}, indent=2) + "\n")
    else:
        out.write(view.actions(actions))
    return 0 if all(a.done for a in actions) else 1


def _queue(args: argparse.Namespace, env: Mapping[str, str]) -> DeadLetterQueue:
    from loopengine.local.admin_dlq import DeadLetterQueue

    if args.limit < 1:
        raise view.BadArgument("--limit must be at least 1")
    return DeadLetterQueue(args.queue_url or env.get("LOOPENGINE_DLQ_URL") or "")


def _redrive_queue(operator: Operator, queue: DeadLetterQueue, args: argparse.Namespace, out: IO[str]) -> int:
    """Re-drive each dead-lettered resume: its turn moves on once; what is handled leaves the queue."""
    from loopengine.app.operator import Action
    from loopengine.domain.base.errors import LoopengineError, NotFound

    wanted = set(args.message)
    actions: list[Action] = []
    for letter in queue.take(args.limit):
        if (wanted and letter.message_id not in wanted) or letter.turn_id is None:
            queue.release(letter)  # another message, or not a resume's: left for someone else
            if letter.turn_id is None and (not wanted or letter.message_id in wanted):
                note = f"message {letter.message_id} is not a resume (no turnId): left in the queue"
                actions.append(Action("", False, note))
            continue
        try:
            done = operator.redrive(letter.turn_id, **letter.note())
            if not done.done:  # the turn moved on without it: nothing to re-drive
                done = operator.dismiss(letter.turn_id, done.note, **letter.note())
        except NotFound:
            queue.release(letter)
            actions.append(Action(letter.turn_id, False, "no such turn in this store: left in the queue"))
            continue
        except LoopengineError as exc:
            queue.release(letter)
            actions.append(Action(letter.turn_id, False, f"{exc}: left in the queue"))
            continue
        queue.delete(letter)
        actions.append(done)
    if not actions:
        out.write("the queue is empty\n" if not args.json else json.dumps({"actions": []}) + "\n")
        return 0
    return _report(actions, args.json, out)
