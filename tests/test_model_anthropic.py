"""AnthropicModel over the real anthropic SDK, with HTTP answered by ``httpx2.MockTransport``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import pytest

from loopengine.app.ports import ModelClient, ModelRequest
from loopengine.authoring.tools import ASK_USER_SPEC
from loopengine.domain.base.errors import FatalModelError, ModelError, RetryableModelError
from loopengine.domain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from loopengine.domain.tokens.usage import PromptCache, Usage
from loopengine.models.anthropic import AnthropicModel

if TYPE_CHECKING:  # the SDK is imported where a test uses it: collecting this module stays cheap
    import anthropic

# One worker runs them all, so one pytest-xdist worker pays for importing the SDK (about 2 s of CPU)
pytestmark = pytest.mark.xdist_group("anthropic-sdk")

API_KEY = "sk-ant-test-0123456789-secret"
Handler = Callable[[httpx2.Request], httpx2.Response]

LOOKUP_SPEC = {
    "name": "lookup_order",
    "description": "Look an order up.",
    "input_schema": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    },
}

HISTORY = [
    Message.user_text("Order A-1001 arrived broken."),
    Message(
        "assistant",
        (
            TextBlock("Let me look."),
            ToolUseBlock(id="toolu_01", name="lookup_order", input={"order_id": "A-1001"}),
            ToolUseBlock(id="toolu_02", name="issue_refund", input={"order_id": "A-1001"}),
        ),
    ),
    Message(
        "user",
        (
            ToolResultBlock(tool_use_id="toolu_01", content='{"status": "delivered"}'),
            ToolResultBlock(tool_use_id="toolu_02", content="denied by a human", is_error=True),
        ),
    ),
]

REPLY = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [
        {"type": "thinking", "thinking": "The user wants a refund.", "signature": "sig"},
        {"type": "text", "text": "I will check with a human."},
        {
            "type": "tool_use",
            "id": "toolu_03",
            "name": "system_ask_user",
            "input": {"question": "Refund 212.00 USD?", "options": ["yes", "no"]},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 321, "output_tokens": 45},
}


def make_request(tools: list[dict[str, Any]] | None = None) -> ModelRequest:
    return ModelRequest(
        model="claude-test",
        system="You are a careful support agent.",
        max_tokens=1024,
        messages=HISTORY,
        tools=[LOOKUP_SPEC, ASK_USER_SPEC] if tools is None else tools,
    )


def error_reply(status: int, kind: str, message: str, **headers: str) -> Handler:
    def handler(request: httpx2.Request) -> httpx2.Response:
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return httpx2.Response(status, json=body, headers={"request-id": "req_42", **headers})

    return handler


class Recorder:
    """An HTTP handler that records what the SDK sent and answers with ``reply``."""

    def __init__(self, reply: Handler | None = None) -> None:
        self.sent: list[httpx2.Request] = []
        self.reply = reply or (lambda _: httpx2.Response(200, json=REPLY))

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request)
        return self.reply(request)

    @property
    def body(self) -> Any:
        return json.loads(self.sent[-1].content)


@pytest.fixture
def clients() -> Iterator[list[anthropic.Anthropic]]:
    made: list[anthropic.Anthropic] = []
    yield made
    for client in made:
        client.close()


@pytest.fixture
def model_for(
    clients: list[anthropic.Anthropic],
) -> Callable[..., AnthropicModel]:
    def build(handler: Handler, cache: PromptCache | None = None, **options: Any) -> AnthropicModel:
        import anthropic

        transport = httpx2.MockTransport(handler)
        client = anthropic.Anthropic(
            api_key=API_KEY,
            max_retries=0,
            http_client=httpx2.Client(transport=transport),
            **options,
        )
        clients.append(client)
        return AnthropicModel(client) if cache is None else AnthropicModel(client, cache=cache)

    return build


def test_sends_the_messages_api_request(model_for: Callable[..., AnthropicModel]) -> None:
    # GIVEN an agent with prompt caching off (tests/test_prompt_cache.py: the breakpoints when on)
    http = Recorder()
    model: ModelClient = model_for(http, cache=PromptCache(enabled=False))

    # WHEN
    model.create(make_request())

    # THEN exactly one POST to /v1/messages, in Messages API form
    assert len(http.sent) == 1
    assert http.sent[0].method == "POST"
    assert http.sent[0].url.path == "/v1/messages"
    assert http.body == {
        "model": "claude-test",
        "system": "You are a careful support agent.",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Order A-1001 arrived broken."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "lookup_order",
                        "input": {"order_id": "A-1001"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_02",
                        "name": "issue_refund",
                        "input": {"order_id": "A-1001"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01",
                        "content": '{"status": "delivered"}',
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02",
                        "content": "denied by a human",
                        "is_error": True,
                    },
                ],
            },
        ],
        "tools": [LOOKUP_SPEC, ASK_USER_SPEC],
    }


def test_omits_tools_when_there_are_none(model_for: Callable[..., AnthropicModel]) -> None:
    http = Recorder()
    model_for(http).create(make_request(tools=[]))
    assert "tools" not in http.body


def test_parses_text_and_tool_use_and_skips_thinking(
    model_for: Callable[..., AnthropicModel],
) -> None:
    # WHEN
    response = model_for(Recorder()).create(make_request())

    # THEN
    assert response.content == (
        TextBlock("I will check with a human."),
        ToolUseBlock(
            id="toolu_03",
            name="system_ask_user",
            input={"question": "Refund 212.00 USD?", "options": ["yes", "no"]},
        ),
    )
    assert response.stop_reason == "tool_use"
    assert response.usage == Usage(input_tokens=321, output_tokens=45)


def test_skips_server_tool_blocks(model_for: Callable[..., AnthropicModel]) -> None:
    reply = {
        **REPLY,
        "content": [
            {"type": "redacted_thinking", "data": "opaque"},
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "refund policy"},
            },
            {"type": "text", "text": "Done."},
        ],
        "stop_reason": "end_turn",
    }
    response = model_for(Recorder(lambda _: httpx2.Response(200, json=reply))).create(make_request())
    assert response.content == (TextBlock("Done."),)
    assert response.stop_reason == "end_turn"


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (529, "overloaded_error", RetryableModelError),
        (429, "rate_limit_error", RetryableModelError),
        (500, "api_error", RetryableModelError),
        (503, "api_error", RetryableModelError),
        (408, "timeout_error", RetryableModelError),
        (400, "invalid_request_error", FatalModelError),
        (401, "authentication_error", FatalModelError),
        (403, "permission_error", FatalModelError),
        (404, "not_found_error", FatalModelError),
        (413, "request_too_large", FatalModelError),
        (422, "invalid_request_error", FatalModelError),
    ],
)
def test_maps_http_errors(
    model_for: Callable[..., AnthropicModel],
    status: int,
    kind: str,
    expected: type[ModelError],
) -> None:
    # GIVEN an API that fails with ``status``
    import anthropic

    model = model_for(error_reply(status, kind, "something went wrong"))

    # WHEN / THEN the error says what happened, and comes from the SDK's exception
    with pytest.raises(expected) as caught:
        model.create(make_request())
    assert type(caught.value) is expected
    message = str(caught.value)
    assert str(status) in message
    assert kind in message
    assert "something went wrong" in message
    assert "req_42" in message
    assert isinstance(caught.value.__cause__, anthropic.APIStatusError)
    assert caught.value.__cause__.status_code == status


@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [(500, "false", FatalModelError), (400, "true", RetryableModelError)],
)
def test_server_retry_hint_wins(
    model_for: Callable[..., AnthropicModel],
    status: int,
    header: str,
    expected: type[ModelError],
) -> None:
    handler = error_reply(status, "api_error", "nope", **{"x-should-retry": header})
    with pytest.raises(expected) as caught:
        model_for(handler).create(make_request())
    assert type(caught.value) is expected


def test_401_message_hints_at_the_key_and_never_contains_it(
    model_for: Callable[..., AnthropicModel],
) -> None:
    # GIVEN an API that echoes the key back in its error message
    handler = error_reply(401, "authentication_error", f"invalid x-api-key {API_KEY}")

    # WHEN
    with pytest.raises(FatalModelError) as caught:
        model_for(handler).create(make_request())

    # THEN
    assert API_KEY not in str(caught.value)
    assert "[redacted]" in str(caught.value)
    assert "ANTHROPIC_API_KEY" in str(caught.value)


def test_connection_error_is_retryable(model_for: Callable[..., AnthropicModel]) -> None:
    import anthropic

    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    with pytest.raises(RetryableModelError, match=r"could not reach.*connection refused") as caught:
        model_for(refuse).create(make_request())
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)


def test_timeout_is_retryable(model_for: Callable[..., AnthropicModel]) -> None:
    import anthropic

    def stall(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("read timed out", request=request)

    with pytest.raises(RetryableModelError, match="timed out") as caught:
        model_for(stall).create(make_request())
    assert isinstance(caught.value.__cause__, anthropic.APITimeoutError)


def test_sdk_retries_happen_before_an_error_surfaces(
    clients: list[anthropic.Anthropic],
) -> None:
    # GIVEN an SDK allowed one retry, and an API overloaded once (asking for a 1 ms wait)
    import anthropic

    http = Recorder()
    answers = iter(
        [error_reply(529, "overloaded_error", "Overloaded", **{"retry-after-ms": "1"}), http.reply]
    )
    http.reply = lambda request: next(answers)(request)
    client = anthropic.Anthropic(
        api_key=API_KEY,
        max_retries=1,
        http_client=httpx2.Client(transport=httpx2.MockTransport(http)),
    )
    clients.append(client)

    # WHEN
    response = AnthropicModel(client).create(make_request())

    # THEN the loop never saw the overload
    assert len(http.sent) == 2
    assert response.stop_reason == "tool_use"


NO_CREDENTIALS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_IDENTITY_TOKEN",
    "ANTHROPIC_IDENTITY_TOKEN_FILE",
    "ANTHROPIC_FEDERATION_RULE_ID",
    "ANTHROPIC_ORGANIZATION_ID",
)


def test_missing_credentials_is_fatal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clients: list[anthropic.Anthropic]
) -> None:
    # GIVEN no credentials anywhere the SDK looks (no env, no profile under $HOME)
    import anthropic

    for name in NO_CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    http = Recorder()
    client = anthropic.Anthropic(
        max_retries=0, http_client=httpx2.Client(transport=httpx2.MockTransport(http))
    )
    clients.append(client)

    # WHEN / THEN nothing is sent and the error says what to set
    with pytest.raises(FatalModelError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(client).create(make_request())
    assert http.sent == []


def test_broken_profile_is_fatal_when_the_client_is_built_lazily(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN a config directory the user chose, holding no profile
    import anthropic

    for name in NO_CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))

    # WHEN / THEN building the client fails inside create(), as a model error
    with pytest.raises(FatalModelError, match=r"CredentialsError.*Config file not found") as caught:
        AnthropicModel(max_retries=0).create(make_request())
    assert isinstance(caught.value.__cause__, anthropic.CredentialsError)


def test_builds_its_client_lazily_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/anthropic")
    model = AnthropicModel(max_retries=0)

    # WHEN
    client = model.client

    # THEN the SDK read the environment, and the client is built once
    assert client.api_key == API_KEY
    assert str(client.base_url).startswith("http://127.0.0.1:9/anthropic")
    assert client.max_retries == 0
    assert model.client is client
    client.close()


def test_importing_the_adapter_does_not_import_the_sdk() -> None:
    code = "import sys, loopengine.models.anthropic; print('anthropic' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
