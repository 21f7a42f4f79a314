"""``mcp_servers:`` in agent.yaml: what is refused (with file:line), and ``loopengine agents --check``.

The check runs the CLI as a user does (a subprocess) against the real MCP server of
tests/mcp_support.py: a server that does not answer is a warning on stderr, never a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopengine.authoring.mcp import McpServer, McpServerModel, schema_hash
from loopengine.authoring.registry import AgentRegistry
from tests.agent_folders import write_agent
from tests.mcp_support import RULES, TOKEN, BillingServer, write_billing_agent

URL = "http://127.0.0.1:9/mcp"


def problems(
    tmp_path: Path, extra: str = "    tools: [charge, lookup]\n", rules: str = RULES, url: str = URL
) -> list[str]:
    folder = write_billing_agent(tmp_path, url, extra=extra, rules=rules)
    (status,) = AgentRegistry(None, [tmp_path]).check()
    assert status.folder == folder
    return [f"{Path(p.file).name}:{p.line}: {p.message}" for p in status.problems]


def test_a_valid_server_entry_loads_with_its_defaults(tmp_path: Path) -> None:
    assert problems(tmp_path) == []
    config = AgentRegistry(None, [tmp_path]).get("billing-desk")
    (server,) = config.mcp_servers
    assert server == McpServer(
        "billing", URL, (("Authorization", "BILLING_TOKEN"),), ("charge", "lookup"), "billing", 15.0, 5.0
    )
    assert config.tools == () and McpServer.from_dict(server.to_dict()) == server


@pytest.mark.parametrize(
    ("extra", "url", "expected"),
    [
        (
            "    header_env: {}\n",
            URL,
            "agent.yaml:8: mcp_servers[0].header_env: unknown key (did you mean 'headers_env'?)",
        ),
        (
            "",
            "http://billing.internal/mcp",
            "agent.yaml:5: mcp_servers[0]: headers_env over plain http",
        ),
        (
            "",
            "https://ops:pw@billing.example/mcp",
            "agent.yaml:6: mcp_servers[0].url: must not carry credentials",
        ),
        (
            "",
            "ftp://billing.example/mcp",
            "agent.yaml:6: mcp_servers[0].url: 'ftp://billing.example/mcp' is not an http(s)",
        ),
        ("    timeout: 0\n", URL, "agent.yaml:8: mcp_servers[0].timeout: 0 is not a duration"),
        (
            "    timeout: 2h\n",
            URL,
            "agent.yaml:8: mcp_servers[0].timeout: input should be less than or equal to 300",
        ),
        ("    prefix: bill.ing\n", URL, "agent.yaml:8: mcp_servers[0].prefix: string should match pattern"),
        (
            "    timeout: 3\n    connect_timeout: 4\n",
            URL,
            "agent.yaml:5: mcp_servers[0]: connect_timeout is part of",
        ),
    ],
)
def test_a_malformed_server_entry_is_refused_at_its_line(
    tmp_path: Path, extra: str, url: str, expected: str
) -> None:
    found = problems(tmp_path, extra=extra, url=url)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_headers_the_transport_sets_are_refused(tmp_path: Path) -> None:
    folder = write_billing_agent(tmp_path, URL)
    text = (
        (folder / "agent.yaml").read_text().replace("{Authorization: BILLING_TOKEN}", "{Mcp-Session-Id: SID}")
    )
    (folder / "agent.yaml").write_text(text)
    (status,) = AgentRegistry(None, [tmp_path]).check()
    assert [
        "header 'Mcp-Session-Id' is set by the MCP transport itself" in p.message for p in status.problems
    ] == [True]


def test_rules_may_name_only_tools_the_servers_can_give(tmp_path: Path) -> None:
    rules = RULES.replace("billing_lookup", "billing_refund")
    assert problems(tmp_path, rules=rules) == [
        "rules.yaml:2: rules[0].tool: 'billing_refund' is not a tool of this agent "
        "(its tools: billing_charge, billing_lookup; or '*')"
    ]
    assert problems(tmp_path / "open", extra="", rules=rules) == []  # no allow-list: any billing_* may exist
    assert problems(
        tmp_path / "other", extra="", rules=RULES.replace("billing_lookup", "shipping_lookup")
    ) == [
        "rules.yaml:2: rules[0].tool: 'shipping_lookup' is not a tool of this agent "
        "(its tools: billing_*; or '*')"
    ]


SECOND = """\
  - name: billing
    url: https://b.example/mcp
  - name: ops
    url: https://o.example/mcp
    prefix: billing_eu
"""


def test_an_mcp_tools_time_limit_is_its_servers_timeout(tmp_path: Path) -> None:
    folder = write_billing_agent(tmp_path, URL)
    agent = (folder / "agent.yaml").read_text()
    (folder / "agent.yaml").write_text(agent + "tool_timeouts: {billing_charge: 5}\n")
    (status,) = AgentRegistry(None, [tmp_path]).check()
    assert [str(p).split("/")[-1] for p in status.problems] == [
        "agent.yaml:9: tool_timeouts.billing_charge: "
        "an MCP tool's time limit is its server's timeout (mcp_servers)"
    ]


def test_two_servers_may_not_share_a_name_or_an_overlapping_prefix(tmp_path: Path) -> None:
    clash = "their tool names could clash"
    assert problems(tmp_path, extra="    tools: [charge, lookup]\n" + SECOND) == [
        "agent.yaml:9: mcp_servers[1].name: is also mcp_servers[0]'s name",
        f"agent.yaml:9: mcp_servers[1]: prefix 'billing' overlaps mcp_servers[0]'s 'billing': {clash}",
        f"agent.yaml:11: mcp_servers[2]: prefix 'billing_eu' overlaps mcp_servers[0]'s 'billing': {clash}",
    ]


def test_an_allow_listed_name_may_not_clash_with_tools_py(tmp_path: Path) -> None:
    folder = write_billing_agent(tmp_path, URL)
    (folder / "tools.py").write_text(
        "from loopengine.authoring.tools import Tool\n"
        "TOOLS = [Tool('billing_charge', 'local', {'type': 'object'}, lambda a: 'x')]\n"
    )
    (status,) = AgentRegistry(None, [tmp_path]).check()
    assert [p.message for p in status.problems] == [
        "mcp_servers[0].tools[0]: 'billing_charge' is also the name of a tool in tools.py"
    ]


def test_the_schema_hash_covers_what_the_model_is_shown_and_nothing_else() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "string"}}}
    reordered = {"properties": {"b": {"type": "string"}, "a": {"type": "number"}}, "type": "object"}
    assert schema_hash("charge", "Charge.", schema) == schema_hash("charge", "Charge.", reordered)
    assert schema_hash("charge", "Charge.", schema) != schema_hash("charge", "Charge in cents.", schema)
    assert schema_hash("charge", "Charge.", schema) != schema_hash(
        "charge", "Charge.", {**schema, "required": ["a"]}
    )
    model = McpServerModel.model_validate({"name": "billing", "url": URL, "tools": ["charge"]})
    server = McpServer.from_model(model)
    assert (
        server.covers("billing_charge")
        and not server.covers("billing_lookup")
        and not server.covers("billingcharge")
    )


def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "LOOPENGINE_AGENTS_PATH": str(tmp_path / "agents"), **env}
    command = [sys.executable, "-m", "loopengine.local.cli", *args]
    return subprocess.run(command, env=full, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_check_lists_the_servers_and_warns_when_one_does_not_answer(tmp_path: Path) -> None:
    billing = BillingServer().start()
    try:
        write_billing_agent(tmp_path / "agents", billing.url, extra="    tools: [charge, lookup, void]\n")
        done = cli(tmp_path, "agents", "--check", BILLING_TOKEN=TOKEN)
        assert done.returncode == 0, done.stderr
        assert "billing server lists no tool 'void'" in done.stderr
        assert "unreachable" not in done.stderr and billing.methods.count("tools/list") == 1
    finally:
        billing.stop()
    done = cli(tmp_path, "agents", "--check", BILLING_TOKEN=TOKEN)
    assert done.returncode == 0 and "OK: 2 agent(s) valid" in done.stdout
    assert "warning: agents/billing_desk/agent.yaml: the billing MCP server is unreachable" in done.stderr
    assert TOKEN.split()[1] not in done.stdout + done.stderr


STDIO = """\
name: clock
model: test-model
system: You tell the time.
mcp_servers:
  - name: time
{entry}"""


def stdio_problems(tmp_path: Path, entry: str) -> list[str]:
    write_agent(tmp_path, "clock", agent=STDIO.format(entry=entry), rules=None, tools="TOOLS = []\n")
    (status,) = AgentRegistry(None, [tmp_path]).check()
    return [f"{Path(p.file).name}:{p.line}: {p.message}" for p in status.problems]


def test_a_stdio_server_loads_and_its_snapshot_keeps_the_command(tmp_path: Path) -> None:
    entry = (
        "    command: [mcp-server-time, --local-timezone, UTC]\n"
        "    env: {TZ: UTC}\n    env_from: {API_KEY: TIME_KEY}\n    tools: [get_current_time]\n"
    )
    assert stdio_problems(tmp_path, entry) == []
    (server,) = AgentRegistry(None, [tmp_path]).get("clock").mcp_servers
    assert (server.url, server.command) == ("", ("mcp-server-time", "--local-timezone", "UTC"))
    assert (server.env, server.env_from) == ((("TZ", "UTC"),), (("API_KEY", "TIME_KEY"),))
    assert (server.timeout, server.connect_timeout) == (15.0, 15.0)  # a Python server starts slowly
    snapshot = server.to_dict()
    assert snapshot["env_from"] == {"API_KEY": "TIME_KEY"} and McpServer.from_dict(snapshot) == server
    http = McpServer.from_model(McpServerModel.model_validate({"name": "billing", "url": URL}))
    assert "command" not in http.to_dict()  # an HTTP server's snapshot (and config hash) is as before


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("    tools: [x]\n", "agent.yaml:5: mcp_servers[0]: needs exactly one of url"),
        (f"    url: {URL}\n    command: [srv]\n", "agent.yaml:5: mcp_servers[0]: needs exactly one of url"),
        (
            "    command: mcp-server-time\n",
            "agent.yaml:6: mcp_servers[0].command: input should be a valid list",
        ),
        ("    command: []\n", "agent.yaml:6: mcp_servers[0].command: list should have at least 1 item"),
        (
            "    command: [srv]\n    headers_env: {Authorization: T}\n",
            "agent.yaml:5: mcp_servers[0]: headers_env is for a url server",
        ),
        (
            f"    url: {URL}\n    env: {{A: b}}\n",
            "agent.yaml:5: mcp_servers[0]: env and env_from are for a command",
        ),
        (
            "    command: [srv]\n    env: {A: b}\n    env_from: {A: B}\n",
            "agent.yaml:5: mcp_servers[0]: A is set by both env and env_from",
        ),
        (
            "    command: [srv]\n    env_from: {A: 1x}\n",
            "agent.yaml:7: mcp_servers[0].env_from.A: string should match",
        ),
    ],
)
def test_a_malformed_stdio_entry_is_refused_at_its_line(tmp_path: Path, entry: str, expected: str) -> None:
    found = stdio_problems(tmp_path, entry)
    assert len(found) == 1 and found[0].startswith(expected), found
