"""A real MCP server for the MCP tests, and an agent folder that uses it.

:class:`BillingServer` is the ``mcp`` SDK's own server (``MCPServer`` over streamable HTTP, served by
uvicorn on a free loopback port, in a thread of the test process) with two tools, ``charge(amount,
currency)`` and ``lookup(order_id)``. In front of it a small ASGI layer refuses any request whose
``Authorization`` is not the expected bearer token (401) and records each JSON-RPC method it lets
through; the tools record each execution. Tests can stop it, change ``charge``'s schema while it
runs, or make ``charge`` slow.

:func:`write_billing_agent` writes the agent folder ``billing-desk``: no tools.py tools, one MCP
server, rules (``billing_lookup`` allow, ``billing_charge`` ask) and a script that turns the user's
message into one call (``lookup A-1``, ``charge 12.5 USD``) and then says what the call answered.
"""

from __future__ import annotations

import hmac
import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn

from tests.agent_folders import write_agent
from tests.dev_support import free_port

if TYPE_CHECKING:  # imported when a server is built: collecting the tests that use it stays cheap
    from mcp.server.mcpserver import MCPServer

TOKEN = "Bearer mcp-secret-7f3a9c1e5b2d"
Asgi = Any


class BillingServer:
    """The billing MCP server, started and stopped by the tests."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.executed: list[tuple[str, dict[str, Any]]] = []
        self.methods: list[str] = []
        self.refused = 0
        self.delay = 0.0
        self.mcp = self._build()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def _build(self) -> MCPServer:
        from mcp.server.mcpserver import MCPServer

        server = MCPServer("billing", log_level="WARNING")

        @server.tool(description="Charge the customer's card.")
        async def charge(amount: float, currency: str) -> dict[str, Any]:
            self.executed.append(("charge", {"amount": amount, "currency": currency}))
            await anyio.sleep(self.delay)
            return {"charge_id": f"ch_{len(self.executed)}", "amount": amount, "currency": currency}

        @server.tool(description="Look up an order by its id.")
        def lookup(order_id: str) -> dict[str, Any]:
            self.executed.append(("lookup", {"order_id": order_id}))
            return {"order_id": order_id, "status": "delivered"}

        @server.tool(description="Refund a charge (not on the agent's allow-list).")
        def refund(charge_id: str) -> str:
            self.executed.append(("refund", {"charge_id": charge_id}))
            return "refunded"

        return server

    def change_charge(self) -> None:
        """Replace ``charge`` with one that takes cents: same name, another schema."""
        self.mcp.remove_tool("charge")

        def charge(amount_cents: int, currency: str) -> str:
            self.executed.append(("charge_v2", {"amount_cents": amount_cents, "currency": currency}))
            return "charged"

        self.mcp.add_tool(charge, description="Charge the customer's card.")

    def count(self, tool: str) -> int:
        """How many times ``tool`` ran on the server."""
        return sum(1 for name, _ in self.executed if name == tool)

    def start(self) -> BillingServer:
        """Serve until :meth:`stop`."""
        config = uvicorn.Config(
            self._guard(self.mcp.streamable_http_app()),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop serving (the port refuses connections afterwards)."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = None

    def _guard(self, inner: Asgi) -> Asgi:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            if not hmac.compare_digest(auth.encode(), self.token.encode()):
                self.refused += 1
                headers = [(b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": b'{"error": "unauthorized"}'})
                return
            body: list[bytes] = []

            async def recording() -> Any:
                message = await receive()
                if message["type"] == "http.request":
                    body.append(message.get("body", b""))
                    if not message.get("more_body") and scope["method"] == "POST":
                        self._note(b"".join(body))
                return message

            await inner(scope, recording, send)

        return app

    def _note(self, raw: bytes) -> None:
        try:
            method = json.loads(raw).get("method")
        except (ValueError, AttributeError):
            return
        if isinstance(method, str):
            self.methods.append(method)


AGENT = """\
name: billing-desk
model: test-model
system: You help with billing.
mcp_servers:
  - name: billing
    url: {url}
    headers_env: {{Authorization: BILLING_TOKEN}}
{extra}"""

RULES = """\
rules:
  - tool: billing_lookup
    decision: allow
  - tool: billing_charge
    decision: ask
default_decision: deny
"""

TOOLS = "TOOLS = []\n"

SCRIPT = """\
from loopengine.models.scripted import call, say, use

PREFIX = {prefix!r}


def respond(request):
    msgs = request.messages
    start = max(i for i, m in enumerate(msgs) if m.role == "user" and m.text)
    results = [r for m in msgs[start + 1 :] for r in m.tool_results]
    if results:
        return say("answer: " + results[-1].content)
    words = msgs[start].text.split()
    if words[0] == "lookup":
        return call(use(PREFIX + "_lookup", {{"order_id": words[1]}}))
    if words[0] == "charge":
        return call(use(PREFIX + "_charge", {{"amount": float(words[1]), "currency": words[2]}}))
    return call(use(PREFIX + "_" + words[1], {{"charge_id": "ch_1"}}))
"""


def write_billing_agent(
    root: Path,
    url: str,
    extra: str = "    tools: [charge, lookup]\n",
    prefix: str = "billing",
    rules: str = RULES,
) -> Path:
    """The ``billing-desk`` agent folder under ``root`` (``extra``: more keys of its server entry)."""
    return write_agent(
        root,
        "billing-desk",
        agent=AGENT.format(url=url, extra=extra),
        rules=rules,
        tools=TOOLS,
        script=SCRIPT.format(prefix=prefix),
    )
