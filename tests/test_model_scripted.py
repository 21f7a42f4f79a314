"""ScriptedModel: a stateless script, deterministic ids, recorded requests."""

from __future__ import annotations

import pytest

from loopengine.app.ports import ModelClient, ModelRequest, ModelResponse
from loopengine.domain.base.errors import FatalModelError
from loopengine.domain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from loopengine.domain.tokens.usage import Usage
from loopengine.models.scripted import ScriptedModel, call, derived_id, say, use

SCRIPT = [
    call(use("lookup_order", {"order_id": "A-1001"}, text="Let me look that up.")),
    say("Your order arrived broken."),
]


def request(*messages: Message) -> ModelRequest:
    return ModelRequest(model="scripted", system="be kind", max_tokens=100, messages=list(messages), tools=[])


def tool_round(response: ModelResponse) -> list[Message]:
    """The assistant message for ``response`` plus a user message answering its tool_uses."""
    assistant = Message("assistant", response.content)
    results = tuple(ToolResultBlock(u.id, '{"ok": true}') for u in assistant.tool_uses)
    return [assistant, Message("user", results)]


def test_is_a_model_client() -> None:
    model: ModelClient = ScriptedModel.from_list([say("hi")])
    assert model.create(request(Message.user_text("hello"))) == say("hi")


def test_builders() -> None:
    # GIVEN / WHEN
    answer = say("done")
    batch = call(use("a", {"x": 1}, id="toolu_fixed", text="First a."), use("b", {}))

    # THEN
    assert answer.content == (TextBlock("done"),)
    assert answer.stop_reason == "end_turn"
    assert batch.stop_reason == "tool_use"
    assert batch.content == (
        TextBlock("First a."),
        ToolUseBlock(id="toolu_fixed", name="a", input={"x": 1}),
        ToolUseBlock(id="", name="b", input={}),
    )
    with pytest.raises(ValueError, match="at least one"):
        call()


def test_use_copies_its_input() -> None:
    args = {"order_id": "A-1001"}
    scripted = use("lookup_order", args)
    args["order_id"] = "changed"
    assert scripted.input == {"order_id": "A-1001"}


def test_from_list_is_stateless_across_instances() -> None:
    # GIVEN a first process that runs the first step of the script
    first = ScriptedModel.from_list(SCRIPT)
    history = [Message.user_text("my order is broken")]
    step1 = first.create(request(*history))
    assert step1.stop_reason == "tool_use"
    history += tool_round(step1)

    # WHEN a fresh instance (another process, after a pause) is asked to continue
    second = ScriptedModel.from_list(SCRIPT)
    step2 = second.create(request(*history))

    # THEN it continues with the second response, and the first instance would too
    assert step2 == say("Your order arrived broken.")
    assert first.create(request(*history)) == step2
    assert first.create(request(history[0])) == step1


def test_ids_are_derived_from_the_request_and_deterministic() -> None:
    # GIVEN two calls of the same tool in one batch, no ids given
    script = [call(use("send_email", {"to": "a"}), use("send_email", {"to": "b"})), say("ok")]
    req = request(Message.user_text("email both"))

    # WHEN two independent instances answer the same request
    one = ScriptedModel.from_list(script).create(req)
    two = ScriptedModel.from_list(script).create(req)

    # THEN ids agree across instances, differ within the batch, and follow derived_id
    ids = [b.id for b in Message("assistant", one.content).tool_uses]
    assert ids == [b.id for b in Message("assistant", two.content).tool_uses]
    assert len(set(ids)) == 2
    assert ids == [derived_id(req, 0, "send_email"), derived_id(req, 1, "send_email")]
    assert all(i.startswith("toolu_") for i in ids)


def test_ids_are_unique_within_a_conversation() -> None:
    # GIVEN the same call scripted twice in a row
    same = call(use("lookup_order", {"order_id": "A-1001"}))
    model = ScriptedModel.from_list([same, same, say("done")])
    history = [Message.user_text("look twice")]

    # WHEN both rounds run
    for _ in range(2):
        history += tool_round(model.create(request(*history)))

    # THEN every tool_use id of the conversation is distinct
    ids = [u.id for m in history for u in m.tool_uses]
    assert len(ids) == 2
    assert len(set(ids)) == 2


def test_fixed_ids_are_kept() -> None:
    model = ScriptedModel.from_list([call(use("a", {}, id="toolu_mine"), use("b", {}))])
    response = model.create(request(Message.user_text("go")))
    ids = [u.id for u in Message("assistant", response.content).tool_uses]
    assert ids[0] == "toolu_mine"
    assert ids[1] == derived_id(request(Message.user_text("go")), 1, "b")


def test_running_past_the_end_is_fatal() -> None:
    # GIVEN a one-step script that already answered
    model = ScriptedModel.from_list([say("only")])
    history = [Message.user_text("hi"), Message("assistant", (TextBlock("only"),))]
    history.append(Message.user_text("and again?"))

    # WHEN / THEN
    with pytest.raises(FatalModelError, match=r"ran out.*1 assistant.*only 1 response"):
        model.create(request(*history))


def test_requests_are_recorded_in_order() -> None:
    # GIVEN
    model = ScriptedModel.from_list(SCRIPT)
    first = request(Message.user_text("hi"))
    second = request(Message.user_text("hi"), *tool_round(model.create(first)))

    # WHEN
    model.create(second)

    # THEN
    assert model.requests == [first, second]


def test_responder_sees_the_request_and_gets_ids_filled() -> None:
    # GIVEN a responder that echoes the last user text as a tool argument
    def echo(req: ModelRequest) -> ModelResponse:
        return call(use("echo", {"text": req.messages[-1].text}))

    model = ScriptedModel(echo)

    # WHEN
    response = model.create(request(Message.user_text("ping")))

    # THEN
    (tool_use,) = Message("assistant", response.content).tool_uses
    assert tool_use.input == {"text": "ping"}
    assert tool_use.id == derived_id(request(Message.user_text("ping")), 0, "echo")
    assert len(model.requests) == 1


def test_responder_errors_propagate_after_recording() -> None:
    model = ScriptedModel.from_list([])
    req = request(Message.user_text("hi"))
    with pytest.raises(FatalModelError, match="0 assistant"):
        model.create(req)
    assert model.requests == [req]


def test_usage_is_an_honest_estimate_of_the_request_and_answer_and_a_scripts_own_is_kept() -> None:
    model = ScriptedModel.from_list([say("Your order arrived broken."), say("ok")])
    short = model.create(request(Message.user_text("hi")))
    history = [Message.user_text("hi"), Message("assistant", short.content), Message.user_text("x" * 4000)]
    long = model.create(request(*history))
    # about four characters a token, of the whole prompt and of the answer; no prompt cache offline
    assert 0 < short.usage.input_tokens < 60 and short.usage.output_tokens > 5
    assert 1000 <= long.usage.input_tokens - short.usage.input_tokens <= 1100
    assert short.usage.cache_creation_input_tokens == short.usage.cache_read_input_tokens == 0
    own = Usage(input_tokens=7, output_tokens=3)
    given = ScriptedModel(lambda _r: ModelResponse((TextBlock("hi"),), usage=own)).create(request())
    assert given.usage is own
