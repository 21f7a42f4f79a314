"""The ``loopengine`` command line."""

from __future__ import annotations

import argparse
import math
import os
import sys

from loopengine.domain.base.errors import LoopengineError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopengine", description="Durable tool-calling agents that pause for a human."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the offline end-to-end walkthrough")
    demo.add_argument(
        "--db", default=None, help="SQLite file (default: $LOOPENGINE_DB or .loopengine/demo.db)"
    )
    demo.add_argument("--fresh", action="store_true", help="start from an empty database file")
    _add_dev(sub)
    agents = sub.add_parser("agents", help="list the agents (the agents package and LOOPENGINE_AGENTS_PATH)")
    agents.add_argument(
        "--check", action="store_true", help="validate every agent; print file:line errors; exit 1 on any"
    )
    new = sub.add_parser("new-agent", help="scaffold a working agent folder (runs offline)")
    new.add_argument("name", help="the agent's route name, e.g. returns-desk")
    new.add_argument(
        "--dir",
        default=None,
        help="folder to create it in (default: the agents package if in this checkout, else ./agents)",
    )
    _add_chat(sub)
    from loopengine.local.admin import add_parser as add_admin

    add_admin(sub)
    return parser


def _add_dev(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``loopengine dev``: serve the HTTP API locally."""
    dev = sub.add_parser(
        "dev", help="serve the HTTP API locally (127.0.0.1 by default; same handlers as AWS)"
    )
    dev.add_argument("--port", type=int, default=8787, help="port to listen on (default 8787)")
    dev.add_argument(
        "--host",
        default="127.0.0.1",
        help="address or name to listen on (default 127.0.0.1); requests must name it or a loopback "
        "name in their Host header",
    )
    dev.add_argument(
        "--read-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds a client has to send a whole request (default 10)",
    )
    dev.add_argument(
        "--workers", type=int, default=4, help="execution environments started at once (processes; default 4)"
    )
    dev.add_argument(
        "--max-environments",
        type=int,
        default=32,
        metavar="N",
        help="the most environments run at once: more start while every one is busy (default 32; at "
        "least --workers + 1); long-polls hold at most N - workers of them",
    )
    dev.add_argument(
        "--sweep-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="run the sweep (expiry, stalled turns, notification retries) this often; 0: never (default 10)",
    )


def _add_chat(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``loopengine chat``: talk to an agent in the terminal."""
    chat = sub.add_parser("chat", help="talk to an agent in the terminal; decide its pending items inline")
    chat.add_argument("agent", help="the agent's route name, e.g. customer-service")
    chat.add_argument("--url", default="http://127.0.0.1:8787", help="API base URL (default: loopengine dev)")
    chat.add_argument("--user", default=None, help="Basic auth user (or LOOPENGINE_CHAT_AUTH=user:password)")
    chat.add_argument("--password", default=None, help="Basic auth password (with --user)")
    chat.add_argument("--session", default=None, help="continue this sessionId")
    chat.add_argument(
        "--live-wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="leave a pending item to the other channels after this long without an answer "
        "(default: the agent's live_wait, else wait until Ctrl-C)",
    )
    chat.add_argument(
        "--wait-server",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="wait this long for a server that does not answer yet (default 30: loopengine dev starting)",
    )


def _chat(args: argparse.Namespace) -> int:
    from loopengine.local.chat import main as chat

    if args.live_wait is not None and (not math.isfinite(args.live_wait) or args.live_wait <= 0):
        print("loopengine chat: --live-wait must be a positive number of seconds", file=sys.stderr)
        return 2
    if (args.user is None) != (args.password is None):
        print("loopengine chat: --user and --password go together", file=sys.stderr)
        return 2
    auth = os.environ.get("LOOPENGINE_CHAT_AUTH") or None
    hint: str | None = '"$LOOPENGINE_CHAT_AUTH"'
    if args.user is not None:
        auth, hint = f"{args.user}:{args.password}", args.user
    if not math.isfinite(args.wait_server) or args.wait_server < 0:
        print("loopengine chat: --wait-server must be a number of seconds, 0 or more", file=sys.stderr)
        return 2
    hint = hint if auth else None
    return chat(args.agent, args.url, auth, args.session, args.live_wait, hint, server_wait=args.wait_server)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from loopengine.local.demo import run_demo

            db = args.db or os.environ.get("LOOPENGINE_DB") or ".loopengine/demo.db"
            return run_demo(db, fresh=args.fresh)
        if args.command == "dev":
            from loopengine.local.dev import serve

            if args.workers < 1:
                print("loopengine dev: --workers must be at least 1", file=sys.stderr)
                return 2
            if not math.isfinite(args.sweep_interval) or args.sweep_interval < 0:
                print("loopengine dev: --sweep-interval must be 0 (off) or more", file=sys.stderr)
                return 2
            if not math.isfinite(args.read_timeout) or args.read_timeout <= 0:
                print("loopengine dev: --read-timeout must be more than 0", file=sys.stderr)
                return 2
            return serve(
                args.port,
                args.workers,
                args.sweep_interval,
                args.host,
                args.read_timeout,
                max(args.max_environments, args.workers + 1),
            )
        if args.command == "chat":
            return _chat(args)
        if args.command == "agents":
            from loopengine.local.agents_cli import list_agents

            return list_agents(os.environ, check=args.check)
        if args.command == "new-agent":
            from loopengine.local.agents_cli import scaffold

            return scaffold(os.environ, args.name, args.dir)
        if args.command == "admin":
            from loopengine.local.admin import main as admin

            return admin(args, os.environ)
    except LoopengineError as exc:
        print(f"loopengine: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
