"""An MCP server to try an agent's ``mcp_servers`` with: a shop's orders, over streamable HTTP.

    ORDERS_TOKEN="Bearer <something secret>" python examples/orders_mcp.py [--port 9000]

Built with the ``mcp`` package (its ``MCPServer``, served by uvicorn on 127.0.0.1; ``--port 0``: any free
port, the first line says which). Two tools: ``lookup(order_id)`` reads an order and ``refund(order_id,
amount_cents, reason)`` refunds one (once per order: a second refund of the same order is an error). A
request whose ``Authorization`` header is not ``$ORDERS_TOKEN`` gets 401, so the agent's
``headers_env: {Authorization: ORDERS_TOKEN}`` is what lets it in. Each tool run prints one line (the
order and what was done: no header, no token). docs/walkthrough.md shows an agent using it.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import os
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {
        "order_id": "A-1001",
        "item": "mug",
        "paid_cents": 1250,
        "currency": "usd",
        "status": "delivered",
    },
    "A-1002": {
        "order_id": "A-1002",
        "item": "teapot",
        "paid_cents": 4200,
        "currency": "usd",
        "status": "shipped",
    },
}
LOCK = threading.Lock()


def say(line: str) -> None:
    """One line of the server's log, on stdout at once."""
    print(line, flush=True)


def build() -> MCPServer:
    """The server and its two tools."""
    server = MCPServer("orders", log_level="WARNING")

    @server.tool(description="Look up an order of the shop by its id (e.g. A-1001).")
    def lookup(order_id: str) -> dict[str, Any]:
        say(f"lookup {order_id}")
        with LOCK:
            order = ORDERS.get(order_id)
            if order is None:
                raise ValueError(f"no order {order_id}")
            return dict(order)

    @server.tool(description="Refund an order (amount in cents, at most what was paid), once.")
    def refund(order_id: str, amount_cents: int, reason: str) -> dict[str, Any]:
        with LOCK:
            order = ORDERS.get(order_id)
            if order is None:
                raise ValueError(f"no order {order_id}")
            if order["status"] == "refunded":
                raise ValueError(f"order {order_id} was refunded already")
            if not 0 < amount_cents <= order["paid_cents"]:
                raise ValueError(f"amount_cents must be between 1 and {order['paid_cents']}")
            order["status"] = "refunded"
        say(f"refund {order_id} {amount_cents} {order['currency']}: {reason}")
        return {
            "order_id": order_id,
            "refund_id": f"rf_{order_id}",
            "amount_cents": amount_cents,
            "status": "refunded",
        }

    return server


def guarded(inner: Asgi, expected: str) -> Asgi:
    """``inner`` behind a check of the Authorization header (constant time); 401 otherwise."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected.encode()):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"unauthorized\n"})
                return
        await inner(scope, receive, send)

    return app


def main() -> int:
    """Serve until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9000)
    port = parser.parse_args().port
    token = os.environ.get("ORDERS_TOKEN", "")
    if not token:
        print(
            "orders_mcp.py: set ORDERS_TOKEN (the Authorization header the agent must send)", file=sys.stderr
        )
        return 2
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)  # connections wait in the backlog until uvicorn serves them
    app = guarded(build().streamable_http_app(), token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    say(f"orders MCP server on http://127.0.0.1:{sock.getsockname()[1]}/mcp (tools: lookup, refund)")
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
