"""MCP servers under the same rules as tools.py: their config, their tools as :class:`Tool`, their pins.

An agent.yaml may name MCP servers (``mcp_servers:``, see docs/agents.md). When a turn starts their
tools are listed (through an :class:`McpConnector`, the port an adapter in ``loopengine.mcp`` fills
with the ``mcp`` SDK) and become ordinary tools named ``<prefix>_<tool>`` (the prefix defaults to
the server's name), so rules, approvers, edits, ``argsHash`` and policies apply to them unchanged.

Each listed tool is pinned with the turn's config: its name, description, input schema and an
:class:`McpPin` (server, the server's own tool name, and :func:`schema_hash` of what the model was
shown). A resume on another machine rebuilds the tools from the snapshot without listing them. At
call time the adapter lists the server again in the same session and runs the call only when the
tool's hash is still the pinned one; otherwise the call is answered, not run:

    McpNotRun        the call never reached the tool (server unreachable, a header's variable unset,
                     the tool changed or vanished since the turn started): an ``error`` outcome
    McpToolFailed    the server ran the tool and it reported an error: an ``error`` outcome
    ToolOutcomeUnknown (domain)  the request was sent and no answer came: ``unknown``, never re-run

A server is reached over streamable HTTP (``url``) or started as a child process spoken to over
stdio (``command``); :mod:`loopengine.authoring.mcp_transport` checks those keys. Header values
(``headers_env``) and a child's secret variables (``env_from``) come from environment variables read
at call time; they are never part of a snapshot, a message, a log line or an audit event.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from pydantic import Field, model_validator

from loopengine.authoring.mcp_transport import Command, EnvName, Headers, Url, transport_problem
from loopengine.authoring.tools import ASK_USER, Tool, ToolFn
from loopengine.domain.base.errors import LoopengineError
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.stored import Stored, StoredForm
from loopengine.domain.rules import Duration, NonEmpty, Strict

SERVER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"
"""A server's ``name`` (and ``prefix``): letters, digits, ``-`` and ``_``, up to 32 characters."""
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What the Messages API accepts as a tool name (so ``billing.charge`` is spelled ``billing_charge``)."""
DEFAULT_TIMEOUT = 15.0
"""Seconds a listing or a call may take in all (connect, list, call), unless ``timeout`` says otherwise."""
DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds to open a connection to the server, unless ``connect_timeout`` says otherwise."""
MAX_TIMEOUT = 300.0
GRACE = 2.0
"""An MCP tool's own ``timeout`` is its server's plus this: the client's deadline comes first, so it
can tell "never sent" (not run) from "sent, no answer" (unknown) before the runner gives up."""
Seconds = Annotated[Duration, Field(le=MAX_TIMEOUT)]


class McpNotRun(LoopengineError):
    """The call did not reach the tool; the message says why and that it was not run."""

    code = "mcp_not_run"


class McpToolFailed(LoopengineError):
    """The server ran the tool and answered with an error result."""

    code = "mcp_tool_failed"


class McpServerModel(Strict):
    """One entry of ``mcp_servers:`` in agent.yaml."""

    name: Annotated[str, Field(pattern=SERVER_NAME)]
    url: Url | None = None
    command: Command | None = None
    env: dict[EnvName, str] | None = None
    env_from: dict[EnvName, EnvName] | None = None
    headers_env: Headers | None = None
    tools: list[NonEmpty] | None = None
    prefix: Annotated[str, Field(pattern=SERVER_NAME)] | None = None
    timeout: Seconds | None = None
    connect_timeout: Seconds | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerModel:
        problem = transport_problem(self.url, self.command, self.headers_env, self.env, self.env_from)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _connect_within_timeout(self) -> McpServerModel:
        if self.connect_timeout is not None and self.connect_timeout > (self.timeout or DEFAULT_TIMEOUT):
            raise ValueError("connect_timeout is part of timeout, so it cannot be longer")
        return self


@dataclass(frozen=True, slots=True)
class McpServer:
    """An MCP server as a turn pins it (header *names* and variable names only, never values).

    A stdio server has ``command`` (and ``url`` ""); its ``env`` holds literal values, ``env_from``
    the names of the variables its secrets are read from.
    """

    name: str
    url: str
    headers_env: tuple[tuple[str, str], ...] = ()
    tools: tuple[str, ...] | None = None
    prefix: str = ""
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    env_from: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def from_model(model: McpServerModel) -> McpServer:
        """The server of a validated agent.yaml entry, defaults filled in.

        A stdio server's ``connect_timeout`` (starting the process and its handshake) defaults to its
        ``timeout``: a Python server takes a second or two to start.
        """
        timeout = model.timeout or DEFAULT_TIMEOUT
        connect = timeout if model.command else min(DEFAULT_CONNECT_TIMEOUT, timeout)
        return McpServer(
            name=model.name,
            url=model.url or "",
            headers_env=tuple(sorted((model.headers_env or {}).items())),
            tools=tuple(model.tools) if model.tools is not None else None,
            prefix=model.prefix or model.name,
            timeout=timeout,
            connect_timeout=model.connect_timeout or connect,
            command=tuple(model.command or ()),
            env=tuple(sorted((model.env or {}).items())),
            env_from=tuple(sorted((model.env_from or {}).items())),
        )

    def exposed(self, tool: str) -> str:
        """The name the model and the rules use for the server's ``tool``."""
        return f"{self.prefix}_{tool}"

    def covers(self, name: str) -> bool:
        """Whether ``name`` may be one of this server's tools (rules are checked against this)."""
        head = f"{self.prefix}_"
        return name.startswith(head) and (self.tools is None or name[len(head) :] in self.tools)

    def headers(self, env: Mapping[str, str]) -> dict[str, str]:
        """The request headers, read from ``env`` now; ``McpNotRun`` names a variable that is unset."""
        return self._read("header", self.headers_env, env)

    def secrets(self, env: Mapping[str, str]) -> dict[str, str]:
        """A stdio server's ``env_from`` variables, read from ``env`` now (``McpNotRun`` as headers)."""
        return self._read("env", self.env_from, env)

    def _read(self, what: str, pairs: tuple[tuple[str, str], ...], env: Mapping[str, str]) -> dict[str, str]:
        out = {}
        for key, var in pairs:
            value = env.get(var)
            if not value:
                raise McpNotRun(f"{self.name} server: {what} {key} needs {var}, which is not set")
            out[key] = value
        return out

    def to_dict(self) -> JsonDict:
        """The snapshot form."""
        return {
            "name": self.name,
            "url": self.url,
            "headers_env": dict(self.headers_env),
            "tools": list(self.tools) if self.tools is not None else None,
            "prefix": self.prefix,
            "timeout": self.timeout,
            "connect_timeout": self.connect_timeout,
            **(
                {"command": list(self.command), "env": dict(self.env), "env_from": dict(self.env_from)}
                if self.command
                else {}
            ),
        }

    @staticmethod
    def from_dict(d: JsonDict) -> McpServer:
        """Read :meth:`to_dict` back."""
        return McpServer(
            name=str(d["name"]),
            url=str(d["url"]),
            headers_env=_pairs(d.get("headers_env")),
            tools=tuple(str(t) for t in d["tools"]) if d.get("tools") is not None else None,
            prefix=str(d.get("prefix") or d["name"]),
            timeout=float(d.get("timeout") or DEFAULT_TIMEOUT),
            connect_timeout=float(d.get("connect_timeout") or DEFAULT_CONNECT_TIMEOUT),
            command=tuple(str(word) for word in d.get("command") or ()),
            env=_pairs(d.get("env")),
            env_from=_pairs(d.get("env_from")),
        )


def _pairs(mapping: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in dict(mapping or {}).items()))


@dataclass(frozen=True, slots=True)
class ListedTool:
    """A tool as the server lists it (its own name)."""

    name: str
    description: str
    input_schema: JsonDict

    def schema_hash(self) -> str:
        """:func:`schema_hash` of this listing."""
        return schema_hash(self.name, self.description, self.input_schema)


def schema_hash(name: str, description: str, input_schema: JsonDict) -> str:
    """``sha256:`` of the canonical JSON of everything the model is shown about a tool.

    The description counts: "amount in cents" becoming "amount in dollars" changes what an approved
    call means as surely as a changed schema does.
    """
    body = {"name": name, "description": description, "inputSchema": input_schema}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class McpPin(StoredForm):
    """What a turn pinned about one MCP tool: which server, the server's tool name, and its hash."""

    server: str
    tool: str
    schema_hash: str


McpPin.stored = Stored(McpPin)
"""The snapshot form (the ``mcp`` key of the tool's entry): ``server``, ``tool``, ``schemaHash``."""


@dataclass(frozen=True, slots=True)
class McpAnswer:
    """The server's answer to a call, rendered as tool_result text."""

    text: str
    is_error: bool = False


class McpConnector(Protocol):
    """The client side of MCP, as the core needs it (``loopengine.mcp.client`` is the real one)."""

    def list_tools(self, server: McpServer) -> list[ListedTool]:
        """Every tool the server lists now; ``McpNotRun`` when it cannot be reached."""
        ...

    def call_tool(self, server: McpServer, pin: McpPin, args: JsonDict) -> McpAnswer:
        """Call the pinned tool in a session that first checks its hash.

        ``McpNotRun`` when nothing was sent (unreachable, changed, vanished);
        ``ToolOutcomeUnknown`` when the request went out and no answer came back.
        """
        ...


@dataclass(frozen=True, slots=True)
class McpTools:
    """One server's listing turned into tools (with their pins), and the tools it left out, and why."""

    tools: tuple[Tool, ...]
    pins: dict[str, McpPin]
    skipped: tuple[str, ...] = ()


def tools_of(server: McpServer, listed: Sequence[ListedTool], connector: McpConnector | None) -> McpTools:
    """The tools the model may see of ``server``'s listing: allow-listed, well-named, object schemas."""
    tools, pins, skipped = [], {}, []
    seen = {t.name for t in listed}
    for item in listed:
        if server.tools is not None and item.name not in server.tools:
            continue
        name = server.exposed(item.name)
        why = _unusable(name, item)
        if why:
            skipped.append(f"{server.name} server's tool {item.name!r} is left out: {why}")
            continue
        pin = McpPin(server.name, item.name, item.schema_hash())
        run = executor(server, pin, connector)
        tools.append(Tool(name, item.description, item.input_schema, run, server.timeout + GRACE))
        pins[name] = pin
    for missing in [t for t in server.tools or () if t not in seen]:
        skipped.append(f"{server.name} server lists no tool {missing!r} (named in its tools: allow-list)")
    return McpTools(tuple(tools), pins, tuple(skipped))


def _unusable(name: str, item: ListedTool) -> str | None:
    if not TOOL_NAME.match(name) or name == ASK_USER:
        return f"{name!r} is not a tool name the model accepts (^[a-zA-Z0-9_-]{{1,64}}$)"
    if item.input_schema.get("type") != "object":
        return "its input schema is not a JSON object schema"
    return None


def executor(server: McpServer | None, pin: McpPin, connector: McpConnector | None) -> ToolFn:
    """The code of a pinned MCP tool: call it through ``connector`` under the pin's hash."""

    def run(args: JsonDict) -> Any:
        if server is None:
            raise McpNotRun(f"this turn's config has no MCP server {pin.server!r}: not run")
        if connector is None:
            raise McpNotRun(f"this deployment has no MCP client for the {server.name} server: not run")
        answer = connector.call_tool(server, pin, args)
        if answer.is_error:
            raise McpToolFailed(
                f"the {server.name} server's {pin.tool} tool answered with an error: {answer.text}"
            )
        return answer.text

    return run


def servers_from_snapshot(snapshot: JsonDict) -> dict[str, McpServer]:
    """The MCP servers a snapshot pinned, by name."""
    return {s["name"]: McpServer.from_dict(s) for s in snapshot.get("mcp_servers") or ()}


Located = tuple[tuple[str | int, ...], str]


def mcp_problems(servers: Sequence[McpServerModel], local: Sequence[str]) -> list[Located]:
    """What contradicts within ``mcp_servers`` and against tools.py's names, each at its agent.yaml path."""
    found: list[Located] = []
    names: dict[str, int] = {}
    prefixes: dict[str, int] = {}
    for index, model in enumerate(servers):
        server = McpServer.from_model(model)
        if server.name in names:
            found.append(
                (("mcp_servers", index, "name"), f"is also mcp_servers[{names[server.name]}]'s name")
            )
        names.setdefault(server.name, index)
        clash = next((p for p in prefixes if _overlap(p, server.prefix)), None)
        if clash is not None:
            other = f"mcp_servers[{prefixes[clash]}]'s {clash!r}"
            msg = f"prefix {server.prefix!r} overlaps {other}: their tool names could clash"
            found.append((("mcp_servers", index), msg))
        prefixes.setdefault(server.prefix, index)
        for position, tool in enumerate(server.tools or ()):
            name, at = server.exposed(tool), ("mcp_servers", index, "tools", position)
            if not TOOL_NAME.match(name):
                found.append((at, f"{name!r} is not a tool name the model accepts (^[a-zA-Z0-9_-]{{1,64}}$)"))
            elif name in local:
                found.append((at, f"{name!r} is also the name of a tool in tools.py"))
    return found


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(f"{b}_") or b.startswith(f"{a}_")


def mcp_names(servers: Sequence[McpServerModel]) -> list[str]:
    """The tool names these servers may give, for messages (``billing_*`` where no allow-list says)."""
    out: list[str] = []
    for server in map(McpServer.from_model, servers):
        out += (
            [server.exposed(t) for t in server.tools] if server.tools is not None else [server.exposed("*")]
        )
    return out


def covered(servers: Sequence[McpServerModel], name: str) -> bool:
    """Whether a rule's ``tool`` may name one of these servers' tools."""
    return any(McpServer.from_model(s).covers(name) for s in servers)
