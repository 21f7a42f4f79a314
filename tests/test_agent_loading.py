"""Agents load strictly: every mistake in an agent folder is refused with its file and line."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from loopengine.authoring.agent_schema import CHANNELS, EVENTS
from loopengine.authoring.registry import AgentRegistry
from loopengine.authoring.tools import ASK_USER
from loopengine.channels.base import CHANNELS as NOTIFY_CHANNELS
from loopengine.domain.base.errors import AgentUnavailable, NotFound
from loopengine.domain.base.yaml_lines import Problem
from loopengine.domain.gate import OPS, Decision
from loopengine.domain.rules import Op
from tests.agent_folders import AGENT_YAML, RULES_YAML, TOOLS_PY, write_agent

CUSTOMER_SERVICE_HASH = "sha256:2cd5c792b4b7052750ea74a453ba604df83e4a1cb716f283bf2bd15148ad2d7c"
"""The config hash the shipped customer-service agent had before strict loading: it must not move."""


def problems_of(root: Path, name: str = "shop") -> list[Problem]:
    with pytest.raises(AgentUnavailable) as info:
        AgentRegistry(package=None, paths=[root]).get(name)
    assert info.value.code == "agent_unavailable"
    return list(info.value.problems)


def only(root: Path, name: str = "shop") -> tuple[str, int, str]:
    [p] = problems_of(root, name)
    return "/".join(p.file.rsplit("/", 2)[-2:]), p.line, p.message


def test_the_shipped_agent_loads_with_the_same_config_hash() -> None:
    config = AgentRegistry().get("customer-service")
    assert config.config_hash() == CUSTOMER_SERVICE_HASH
    assert AgentRegistry().check()[0].problems == ()


def test_a_valid_folder_loads(tmp_path: Path) -> None:
    write_agent(tmp_path, "shop")
    config = AgentRegistry(package=None, paths=[tmp_path]).get("shop")
    assert [t.name for t in config.tools] == ["refund"]
    assert config.rules.evaluate("refund", {"x": 1}).decision is Decision.ASK


def test_fixed_tables_agree_with_the_code() -> None:
    assert set(get_args(Op)) == set(OPS)
    assert set(CHANNELS) == set(NOTIFY_CHANNELS)
    assert EVENTS == ("approval", "question", "run_start", "run_finish")


RULE_HEAD = "rules:\n  - tool: refund\n    decision: allow\n"


@pytest.mark.parametrize(
    ("rules", "line", "message"),
    [
        (
            RULE_HEAD + "  - tool: refund\n    decision: ask\n    approver: [alice]\n",
            6,
            "rules[1].approver: unknown key (did you mean 'approvers'?)",
        ),
        (RULE_HEAD + "  - tool: refnud\n    decision: ask\n", 4, "rules[1].tool: 'refnud' is not a tool"),
        (
            RULE_HEAD + f"  - tool: {ASK_USER}\n    decision: deny\n",
            4,
            f"rules[1].tool: {ASK_USER} is not gated",
        ),
        (
            "rules:\n  - tool: refund\n    when: {field: x, op: regex, value: 1}\n    decision: allow\n",
            3,
            "rules[0].when.op: must be 'eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in' or 'contains', not 'regex'",
        ),
        (
            "rules:\n  - tool: refund\n    when: {field: x, op: gt, value: '5'}\n    decision: allow\n",
            3,
            "rules[0].when: 'gt' compares numbers",
        ),
        (
            "rules:\n  - tool: refund\n    when: {field: x, op: gt, value: .nan}\n    decision: allow\n",
            3,
            "rules[0].when.value: must be a finite number, not nan",
        ),
        (
            "rules:\n  - tool: refund\n    when: {field: day, op: eq, value: 2024-01-01}\n"
            "    decision: allow\n",
            3,
            "rules[0].when.value: must be plain JSON",
        ),
        (
            "rules:\n  - tool: refund\n    decision: maybe\n",
            3,
            "rules[0].decision: must be 'allow', 'deny' or 'ask'",
        ),
        ("rules:\n  - tool: refund\n    decision: yes\n", 3, "not True"),
        ("rules:\n  - decision: ask\n", 2, "rules[0].tool: required key is missing"),
        ("rules: []\ndefault_decision: allow_all\n", 2, "default_decision: must be"),
        ("rules: []\ndefault: allow\n", 2, "default: unknown key (did you mean 'default_decision'?)"),
        (
            "rules:\n  - tool: refund\n    decision: ask\n    pending_ttl: soon\n",
            4,
            "rules[0].pending_ttl: 'soon' is not a duration",
        ),
        (
            "rules:\n  - tool: refund\n    decision: ask\n    on_expiry: deny\n",
            2,
            "on_expiry needs a pending_ttl",
        ),
        (
            "rules:\n  - tool: refund\n    decision: ask\n    approvers: [alice, 'root:bob']\n",
            4,
            "rules[0].approvers[1]: 'root:bob': identity kind 'root' is not one of "
            "user, group, slack, lark, email",
        ),
        ("rules:\n  - tool: refund\n    decision: ask\n    approvers: ops@example.com\n", 4, "approvers"),
        (
            "rules:\n  - tool: refund\n    decision: ask\n    tool: other\n",
            4,
            "duplicate key 'tool' (first on line 2)",
        ),
        ("rules:\n  - tool: refund\n    decision: [ask\n", 4, "YAML syntax error"),
        ("- tool: refund\n  decision: ask\n", 1, "must be a mapping of keys, not a list"),
    ],
)
def test_bad_rules_are_refused_with_file_and_line(
    tmp_path: Path, rules: str, line: int, message: str
) -> None:
    write_agent(tmp_path, "shop", rules=rules)
    file, got_line, got = only(tmp_path)
    assert (file, got_line) == ("shop/rules.yaml", line), got
    assert got.startswith(message) or message in got, got


@pytest.mark.parametrize(
    ("agent", "line", "message"),
    [
        (
            AGENT_YAML.format(name="shop") + "max_token: 10\n",
            5,
            "max_token: unknown key (did you mean 'max_tokens'?)",
        ),
        (
            AGENT_YAML.format(name="shop") + "max_tokens: '1024'\n",
            5,
            "max_tokens: input should be a valid integer",
        ),
        (AGENT_YAML.format(name="shop") + "max_iterations: true\n", 5, "max_iterations"),
        (AGENT_YAML.format(name="shop") + "max_tokens: 0\n", 5, "max_tokens: input should be greater than 0"),
        (
            AGENT_YAML.format(name="shop").replace("[refund]", "[refund, refnud]"),
            4,
            "tools[1]: 'refnud' is not",
        ),
        (
            AGENT_YAML.format(name="shop").replace("[refund]", "[refund, refund]"),
            4,
            "tools[1]: 'refund' is listed",
        ),
        (AGENT_YAML.format(name="shop") + "on_new_message: ignore\n", 5, "on_new_message: must be"),
        (AGENT_YAML.format(name="shop") + "pending_ttl: 0s\n", 5, "pending_ttl: '0s' is not a duration"),
        (
            AGENT_YAML.format(name="shop") + "live_wait: forever\n",
            5,
            "live_wait: 'forever' is not a duration",
        ),
        (AGENT_YAML.format(name="shop") + "notifier: {channel: pigeon}\n", 5, "notifier.channel: must be"),
        (
            AGENT_YAML.format(name="shop") + "notifier:\n  channel: webhook\n  events: [approval, paused]\n",
            7,
            "notifier.events[1]: must be",
        ),
        (
            AGENT_YAML.format(name="shop") + "notifier:\n  channel: webhook\n  url: x\n",
            7,
            "notifier.url: unknown",
        ),
        ("name: shop\nmodel: m\n", 1, "system: required key is missing"),
        ("name: shop\nmodel: m\nsystem: ''\n", 3, "system: string should have at least 1 character"),
        ("name: shop\nmodel: m\nsystem: s\nname: shop\n", 4, "duplicate key 'name' (first on line 1)"),
        ("name: shop\nmodel: m\nsystem: 'unterminated\n", 4, "YAML syntax error"),
    ],
)
def test_bad_agent_yaml_is_refused_with_file_and_line(
    tmp_path: Path, agent: str, line: int, message: str
) -> None:
    write_agent(tmp_path, "shop", agent=agent)
    file, got_line, got = only(tmp_path)
    assert (file, got_line) == ("shop/agent.yaml", line), got
    assert got.startswith(message), got


def test_an_invalid_name_is_refused(tmp_path: Path) -> None:
    write_agent(tmp_path, "shop", agent=AGENT_YAML.format(name="shop/../x"))
    [p] = problems_of(tmp_path, "shop/../x")
    assert p.line == 1 and p.message.startswith("name: string should match pattern")


@pytest.mark.parametrize(
    ("tools", "line", "message"),
    [
        ("import os\n\nraise RuntimeError('no database')\n", 3, "cannot import: RuntimeError: no database"),
        ("import no_such_module_anywhere\n", 1, "cannot import: ModuleNotFoundError"),
        ("def broken(:\n", 1, "SyntaxError"),
        ("TOOL = []\n", 1, "defines no TOOLS list"),
        ("TOOLS = ['refund']\n", 1, "TOOLS[0] is a str, not a Tool"),
        ("import sys\nsys.exit(3)\n", 2, "cannot import: SystemExit: 3"),
        (
            TOOLS_PY + f"TOOLS.append(Tool('{ASK_USER}', 'q', SCHEMA, _refund))\n",
            1,
            f"TOOLS[1]: tool name '{ASK_USER}' is built in",
        ),
        (TOOLS_PY + "TOOLS.append(TOOLS[0])\n", 1, "TOOLS[1]: tool name 'refund' is defined twice"),
        (
            TOOLS_PY.replace('"refund", "Refund', '"re fund", "Refund'),
            1,
            "TOOLS[0]: tool name 're fund' must match",
        ),
    ],
)
def test_a_broken_tools_py_is_refused_with_file_and_line(
    tmp_path: Path, tools: str, line: int, message: str
) -> None:
    write_agent(tmp_path, "shop", tools=tools)
    file, got_line, got = only(tmp_path)
    assert (file, got_line) == ("shop/tools.py", line), got
    assert message in got, got


def test_a_missing_tools_py_is_refused(tmp_path: Path) -> None:
    write_agent(tmp_path, "shop", tools=None)
    assert only(tmp_path) == ("shop/tools.py", 1, "missing: every agent needs a tools.py that defines TOOLS")


def test_every_problem_of_a_folder_is_reported_at_once(tmp_path: Path) -> None:
    write_agent(
        tmp_path,
        "shop",
        agent=AGENT_YAML.format(name="shop") + "colour: blue\n",
        rules=RULES_YAML.replace("decision: ask\ndefault", "decision: ask\n    approver: [x]\ndefault"),
    )
    found = problems_of(tmp_path)
    assert [(p.file.rsplit("/", 1)[-1], p.line) for p in found] == [("agent.yaml", 5), ("rules.yaml", 4)]


def test_a_missing_rules_file_means_ask_for_everything(tmp_path: Path) -> None:
    write_agent(tmp_path, "shop", rules=None)
    config = AgentRegistry(package=None, paths=[tmp_path]).get("shop")
    assert config.rules.evaluate("refund", {"x": 1}).decision is Decision.ASK


def test_a_rule_for_every_tool_may_use_a_star(tmp_path: Path) -> None:
    write_agent(tmp_path, "shop", rules="rules:\n  - tool: '*'\n    decision: deny\n")
    config = AgentRegistry(package=None, paths=[tmp_path]).get("shop")
    assert config.rules.evaluate("refund", {"x": 1}).decision is Decision.DENY


def test_duplicate_names_across_folders_are_refused_and_the_rest_loads(tmp_path: Path) -> None:
    write_agent(tmp_path / "a", "shop")
    write_agent(tmp_path / "b", "shop", folder="other_shop")
    write_agent(tmp_path / "b", "desk")
    registry = AgentRegistry(package=None, paths=[tmp_path / "a", tmp_path / "b"])
    with pytest.raises(AgentUnavailable) as info:
        registry.get("shop")
    assert [p.line for p in info.value.problems] == [1, 1]
    assert "is also the name of" in str(info.value) and "other_shop/agent.yaml" in str(info.value)
    assert registry.get("desk").name == "desk"
    with pytest.raises(NotFound):
        registry.get("nobody")


def test_a_folder_whose_yaml_does_not_parse_still_answers_to_its_name(tmp_path: Path) -> None:
    write_agent(tmp_path, "shop", agent="name: shop\nmodel: [\n")
    write_agent(tmp_path, "desk", agent="model: [\n")
    registry = AgentRegistry(package=None, paths=[tmp_path])
    assert registry.names() == ["desk", "shop"]
    for name in ("shop", "desk"):
        with pytest.raises(
            AgentUnavailable,
            match=r"agent.yaml:[23]: YAML syntax error: while parsing a flow node: expected the node content",
        ):
            registry.get(name)


def test_docs_explain_every_key_and_op() -> None:
    from loopengine.authoring.agent_schema import AgentFile, NotifierModel
    from loopengine.domain.rules import IDENTITY_KINDS, RuleModel, RulesFile, WhenModel

    docs = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text()
    keys = [*AgentFile.model_fields, *NotifierModel.model_fields, *RulesFile.model_fields]
    keys += [*RuleModel.model_fields, *WhenModel.model_fields, *OPS, *CHANNELS, *EVENTS]
    missing = [k for k in keys if f"`{k}`" not in docs]
    missing += [k for k in IDENTITY_KINDS if f"`{k}:" not in docs]
    assert missing == []
