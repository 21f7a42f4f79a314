"""A stdio MCP server for tests/test_mcp_stdio.py that can crash in the middle of a call.

Run as ``python -m tests.mcp_stdio_server`` (the ``mcp`` SDK's ``MCPServer``, formerly FastMCP, over
stdio). Its environment says where to record and when to crash:

    TILL_LOG     every execution is appended here as ``<pid> <tool> <json args>`` (executions in
                 the server's process count, whichever process started it)
    TILL_CRASH   when this file exists, ``charge`` records its execution, deletes the file and
                 exits the process at once, before answering (a crash mid-call)
    TILL_TOKEN   a secret the agent passes with ``env_from``; ``whoami`` echoes it (it must come
                 back scrubbed)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("till", log_level="WARNING")


def _record(tool: str, args: dict[str, Any]) -> None:
    with Path(os.environ["TILL_LOG"]).open("a") as out:
        out.write(f"{os.getpid()} {tool} {json.dumps(args, sort_keys=True)}\n")


@server.tool(description="Charge the customer's card.")
def charge(amount: float, currency: str) -> dict[str, Any]:
    _record("charge", {"amount": amount, "currency": currency})
    crash = Path(os.environ["TILL_CRASH"])
    if crash.exists():
        crash.unlink()
        os._exit(3)
    return {"charged": amount, "currency": currency, "pid": os.getpid()}


@server.tool(description="Which process answers, and with what token.")
def whoami() -> dict[str, Any]:
    _record("whoami", {})
    return {"pid": os.getpid(), "ppid": os.getppid(), "token": os.environ.get("TILL_TOKEN", "")}


if __name__ == "__main__":
    server.run("stdio")
