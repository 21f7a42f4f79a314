"""Claude on Amazon Bedrock: ``provider: bedrock`` through the SDK's own ``AnthropicBedrock`` client.

Against :class:`tests.bedrock_api.BedrockRuntime`, a local stand-in of Bedrock's ``invoke`` and
``invoke-with-response-stream`` endpoints (AWS event-stream framing, SigV4 required, the model in the
path), with fake AWS credentials in the environment (the function's role, in AWS) and no API key:
the engine's turn streams, pauses on a gated tool_use, resumes and finishes; prompt-cache breakpoints
ride in the request body and the usage comes back; Bedrock's errors are sorted like the API's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.ports import ModelRequest
from loopengine.authoring.registry import AgentRegistry
from loopengine.bootstrap import ModelChooser, build_engine
from loopengine.domain.base.errors import ConfigError, FatalModelError, RetryableModelError
from loopengine.domain.decisions import Approval
from loopengine.domain.messages import Message, TextBlock, ToolUseBlock
from loopengine.domain.principals import Principal
from loopengine.domain.tokens.usage import Usage
from loopengine.domain.turns import StopReason
from loopengine.http.functions import preload as preload
from loopengine.models.anthropic import BEDROCK, AnthropicModel, bedrock_client
from loopengine.models.scripted import ScriptedModel
from tests.agent_folders import write_agent
from tests.bedrock_api import BedrockRuntime
from tests.token_meter import TokenMeter, prompt_tokens

pytestmark = pytest.mark.xdist_group("anthropic-sdk")

JsonDict = dict[str, Any]
REGION = "eu-west-1"
PROFILE = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"
KEY_ID = "AKIDLOOPENGINETEST"


def model_reply(n: int, body: JsonDict) -> JsonDict:
    """Ask for refund(x=1) (gated: the turn pauses); once it has a result, say so."""
    last = body["messages"][-1]["content"]
    if any(b.get("type") == "tool_result" for b in last):
        content: list[JsonDict] = [{"type": "text", "text": "Refunded one, as you asked."}]
        stop = "end_turn"
    else:
        content = [
            {"type": "text", "text": "I will refund it once a human agrees."},
            {"type": "tool_use", "id": f"toolu_b{n}", "name": "refund", "input": {"x": 1}},
        ]
        stop = "tool_use"
    return {
        "id": f"msg_b{n}",
        "type": "message",
        "role": "assistant",
        "model": PROFILE,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials as the environment gives them (Lambda: the role's); no profile, no files."""
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_BEARER_TOKEN_BEDROCK",
        "ANTHROPIC_BEDROCK_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret-never-sent")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "fake-session-token")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def runtime(aws: None) -> Iterator[BedrockRuntime]:
    stand_in = BedrockRuntime(model_reply, region=REGION, meter=TokenMeter(min_tokens=1), piece=5)
    yield stand_in
    stand_in.close()


def test_a_bedrock_agent_streams_pauses_on_a_gated_call_and_finishes_through_the_sdks_bedrock_client(
    runtime: BedrockRuntime, tmp_path: Path
) -> None:
    # GIVEN an agent with `provider: bedrock` (and a one-hour prompt cache) beside an ordinary one,
    # a deployment with no API key, the function's region and the model its role may invoke
    agents = tmp_path / "agents"
    write_agent(agents, "shop")
    yaml = "name: shop-bedrock\nmodel: claude-sonnet-4-5\nsystem: You refund things.\ntools: [refund]\n"
    write_agent(agents, "shop-bedrock", agent=yaml + "provider: bedrock\nprompt_cache: {ttl: 1h}\n")
    env = {
        "LOOPENGINE_DB": str(tmp_path / "le.db"),
        "LOOPENGINE_AGENTS_PATH": str(agents),
        "AWS_REGION": REGION,
        "ANTHROPIC_BEDROCK_BASE_URL": runtime.url,
        "LOOPENGINE_BEDROCK_MODEL": PROFILE,
    }
    engine = build_engine(env)
    try:
        # WHEN a message comes in: the model asks for the gated refund
        out = engine.send_message("shop-bedrock", "Please refund order 1.")
        assert [p.tool for p in out.pending] == ["refund"] and out.status.value == "paused", out
        # ... and a human approves: the refund runs, the model answers
        engine.resolve(out.pending[0].pending_id, Approval(), Principal("ops"))
        done = engine.turn(out.turn_id)
        # the ordinary agent still has no key: it is the offline script, not Bedrock
        engine.send_message("shop", "refund please")
    finally:
        engine.rt.stores.close()

    # THEN the turn finished with Bedrock's answer, the refund ran once
    assert (done.status.value, done.stop_reason, done.text) == (
        "finished",
        StopReason.END_TURN,
        "Refunded one, as you asked.",
    )
    assert (agents / "shop_bedrock" / "calls.log").read_text() == "1\n"
    # AND both model calls went to Bedrock, streamed, to the deployment's inference profile, SigV4-signed
    # with the environment's credentials for service bedrock in the function's region; never to anything else
    got = runtime.received
    assert [(r.action, r.model_id) for r in got] == [("invoke-with-response-stream", PROFILE)] * 2
    for r in got:
        assert r.headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={KEY_ID}/")
        assert f"/{REGION}/bedrock/aws4_request" in r.headers["authorization"]
        assert r.headers["x-amz-security-token"] == "fake-session-token" and "x-api-key" not in r.headers
        # the prompt-cache breakpoints, with the agent's one-hour ttl: system and the newest message
        hour = {"type": "ephemeral", "ttl": "1h"}
        assert r.body["system"] == [{"type": "text", "text": "You refund things.", "cache_control": hour}]
        assert r.body["messages"][-1]["content"][-1]["cache_control"] == hour
        assert r.body["anthropic_version"]  # the SDK's, in the body (Bedrock has no header for it)
    # ... so the second call (after the approval, in the resume) read the first one's prompt from the cache
    assert runtime.meter is not None
    first, second = runtime.meter.bills
    assert second.usage["cache_read_input_tokens"] == prompt_tokens(first.usage) > 0


def _model(runtime: BedrockRuntime, region: str = REGION) -> AnthropicModel:
    client = bedrock_client(region, runtime.url, max_retries=0)
    return AnthropicModel(client, model=PROFILE, service=BEDROCK)


def _request(on_text: Any = None) -> ModelRequest:
    return ModelRequest(
        "claude-sonnet-4-5", "You refund things.", 256, [Message.user_text("refund 1")], [], on_text=on_text
    )


def test_streamed_text_tool_input_and_usage_arrive_through_the_event_stream(runtime: BedrockRuntime) -> None:
    model = _model(runtime)
    pieces: list[str] = []
    streamed = model.create(_request(pieces.append))
    whole = model.create(_request())

    assert len(pieces) > 3 and "".join(pieces) == "I will refund it once a human agrees."
    expected = (
        TextBlock("I will refund it once a human agrees."),
        ToolUseBlock("toolu_b1", "refund", {"x": 1}),
    )
    assert streamed.content == expected and streamed.stop_reason == "tool_use"
    assert whole.content[1] == ToolUseBlock("toolu_b2", "refund", {"x": 1})  # invoke, not streamed
    assert [r.action for r in runtime.received] == ["invoke-with-response-stream", "invoke"]
    assert runtime.meter is not None
    assert [streamed.usage, whole.usage] == [Usage.from_json(b.usage) for b in runtime.meter.bills]
    assert whole.usage.cache_read_input_tokens == streamed.usage.cache_creation_input_tokens > 0


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        (("throttlingException", "Too many requests, please wait"), RetryableModelError),
        (("modelStreamErrorException", "the model stream failed"), RetryableModelError),
        (("validationException", "prompt is too long"), FatalModelError),
    ],
)
def test_an_exception_frame_mid_stream_is_sorted_like_the_apis_errors(
    aws: None, frame: tuple[str, str], error: type[Exception]
) -> None:
    runtime = BedrockRuntime(model_reply, region=REGION, fail_with=frame)
    try:
        with pytest.raises(error, match=f"Bedrock runtime stream reported {frame[0]}: {frame[1]}"):
            _model(runtime).create(_request(lambda _piece: None))
    finally:
        runtime.close()


def test_a_refused_signature_is_fatal_and_says_what_to_check(runtime: BedrockRuntime) -> None:
    # a client signing for another region than the endpoint's: Bedrock refuses it
    with pytest.raises(
        FatalModelError, match="Bedrock runtime answered 403 UnrecognizedClientException"
    ) as caught:
        _model(runtime, region="us-east-1").create(_request())
    assert "fake-secret-never-sent" not in str(caught.value)


def test_the_provider_comes_from_the_agent_else_the_deployment_and_scripted_wins(aws: None) -> None:
    from anthropic import AnthropicBedrock

    registry = AgentRegistry.from_env({})
    config = registry.get("customer-service")
    bedrock = {"LOOPENGINE_MODEL_PROVIDER": "bedrock", "AWS_REGION": REGION}
    chosen = ModelChooser(bedrock, registry)(config)
    assert isinstance(chosen, AnthropicModel) and chosen.service == BEDROCK and chosen.model is None
    assert type(chosen.client).__name__ == "AnthropicBedrock" and isinstance(chosen.client, AnthropicBedrock)
    assert chosen.client.aws_region == REGION
    assert isinstance(
        ModelChooser({**bedrock, "LOOPENGINE_MODEL": "scripted"}, registry)(config), ScriptedModel
    )
    assert isinstance(ModelChooser({}, registry)(config), ScriptedModel)  # anthropic with no key: offline
    with pytest.raises(ConfigError, match="needs a region"):
        ModelChooser({"LOOPENGINE_MODEL_PROVIDER": "bedrock"}, registry)(config)
    with pytest.raises(ConfigError, match="must be anthropic or bedrock"):
        ModelChooser({"LOOPENGINE_MODEL_PROVIDER": "vertex"}, registry)
    # Lambda's snapshot (and loopengine dev's forkserver) load the SDK for Bedrock too: no key there
    assert preload.wants_model_sdk(bedrock) and not preload.wants_model_sdk(
        {**bedrock, "LOOPENGINE_MODEL": "scripted"}
    )
