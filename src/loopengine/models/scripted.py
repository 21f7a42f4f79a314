"""A deterministic ModelClient for tests, demos and offline runs: no network, no randomness.

:class:`ScriptedModel` answers with a function of the request. :meth:`ScriptedModel.from_list`
plays a fixed script and is stateless: it picks response *k*, where *k* is the number of
assistant messages already in the conversation, so a turn resumed by another process (a fresh
instance) continues exactly where the script left off.

Build scripts with :func:`say` and :func:`call`::

    model = ScriptedModel.from_list([
        call(use("lookup_order", {"order_id": "A-1001"}, text="Let me look.")),
        say("Your order arrived broken; I can refund it."),
    ])

A tool_use written without an ``id`` gets one derived from the request (history length, position
in the response, tool name), so ids are unique within a conversation and identical on every run.

It streams like a real model: given a request with ``on_text``, it hands over the answer's text a word
at a time (:func:`pieces`), ``delay`` seconds apart (0 by default; ``loopengine dev`` sets
``LOOPENGINE_SCRIPTED_DELAY`` to 0.03, so its turns write ``text:delta`` events), before it returns
the answer.

Its ``usage`` is an honest estimate, not a count: about four characters a token (:func:`estimate_tokens`)
of the whole request (system, tools, messages) as input and of the answer as output, with no prompt
cache (the cache counts are 0). A scripted response that sets its own ``usage`` keeps it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from loopengine.app.ports import ModelRequest, ModelResponse
from loopengine.domain.base.errors import FatalModelError
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.messages import Block, TextBlock, ToolUseBlock
from loopengine.domain.tokens.usage import Usage

Responder = Callable[[ModelRequest], ModelResponse]
"""Computes the model's answer to one request."""

_UNASSIGNED = ""
"""The id a tool_use carries until :class:`ScriptedModel` derives one from the request."""
_WORD = re.compile(r"\s*\S+|\s+")
CHARS_PER_TOKEN = 4
"""What :func:`estimate_tokens` takes a token to be, about what Claude's tokenizer averages on English."""


@dataclass(frozen=True)
class ScriptedUse:
    """One scripted tool call, optionally preceded by a sentence of text; see :func:`use`."""

    name: str
    input: JsonDict
    id: str | None = None
    text: str | None = None


def use(name: str, input: JsonDict, id: str | None = None, text: str | None = None) -> ScriptedUse:
    """A tool call for :func:`call`: ``name(input)``, with an optional fixed ``id`` and ``text``."""
    return ScriptedUse(name=name, input=dict(input), id=id, text=text)


def say(text: str) -> ModelResponse:
    """A final answer: one text block, stop reason ``end_turn``."""
    return ModelResponse(content=(TextBlock(text),), stop_reason="end_turn")


def call(*uses: ScriptedUse) -> ModelResponse:
    """A batch of tool calls in order, stop reason ``tool_use``; ids default to derived ones."""
    if not uses:
        raise ValueError("call() needs at least one use(...)")
    blocks: list[Block] = []
    for u in uses:
        if u.text:
            blocks.append(TextBlock(u.text))
        blocks.append(ToolUseBlock(id=u.id or _UNASSIGNED, name=u.name, input=dict(u.input)))
    return ModelResponse(content=tuple(blocks), stop_reason="tool_use")


def pieces(response: ModelResponse) -> list[str]:
    """The response's text as a model streams it: word by word, a newline between text blocks.

    Joined, the pieces are the whole text as ``Message.text`` has it.
    """
    out: list[str] = []
    for i, block in enumerate(b for b in response.content if isinstance(b, TextBlock)):
        if i:
            out.append("\n")
        out.extend(_WORD.findall(block.text))
    return out


def estimate_tokens(text: str) -> int:
    """About how many tokens ``text`` is: one per :data:`CHARS_PER_TOKEN` characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_usage(request: ModelRequest, response: ModelResponse) -> Usage:
    """The usage a real model would report for ``request`` and ``response``, estimated; no prompt cache."""
    prompt = json.dumps([request.tools, request.system, [m.to_dict() for m in request.messages]])
    answer = json.dumps([b.to_dict() for b in response.content])
    return Usage(input_tokens=estimate_tokens(prompt), output_tokens=estimate_tokens(answer))


def derived_id(request: ModelRequest, index: int, name: str) -> str:
    """The id of the ``index``-th tool_use answering ``request``: stable and history-unique."""
    seed = f"{len(request.messages)}:{index}:{name}".encode()
    return "toolu_" + hashlib.sha256(seed).hexdigest()[:24]


@dataclass
class ScriptedModel:
    """A ModelClient that answers with ``responder`` and records every request it was sent.

    ``delay``: seconds between two streamed pieces (for demos and tests of streaming).
    """

    responder: Responder
    requests: list[ModelRequest] = field(default_factory=list)
    delay: float = 0.0

    @classmethod
    def from_list(cls, responses: Sequence[ModelResponse]) -> ScriptedModel:
        """Play ``responses`` in order, choosing by the number of assistant messages so far.

        Running past the end raises ``FatalModelError``.
        """
        script = tuple(responses)

        def next_in_script(request: ModelRequest) -> ModelResponse:
            k = sum(1 for m in request.messages if m.role == "assistant")
            if k >= len(script):
                raise FatalModelError(
                    f"scripted model ran out: the conversation already has {k} assistant "
                    f"message(s) but the script holds only {len(script)} response(s)"
                )
            return script[k]

        return cls(next_in_script)

    def create(self, request: ModelRequest) -> ModelResponse:
        """Record ``request``, then answer it, giving id-less tool_use blocks derived ids and a usage."""
        self.requests.append(request)
        response = self.responder(request)
        if request.on_text is not None:
            self._stream(response, request.on_text)
        if response.usage == Usage():
            response = replace(response, usage=estimate_usage(request, response))
        if not any(isinstance(b, ToolUseBlock) and b.id == _UNASSIGNED for b in response.content):
            return response
        content: list[Block] = []
        index = 0
        for block in response.content:
            if isinstance(block, ToolUseBlock):
                if block.id == _UNASSIGNED:
                    block = replace(block, id=derived_id(request, index, block.name))
                index += 1
            content.append(block)
        return replace(response, content=tuple(content))

    def _stream(self, response: ModelResponse, on_text: Callable[[str], None]) -> None:
        pause = threading.Event()
        for i, piece in enumerate(pieces(response)):
            if i and self.delay > 0:
                pause.wait(self.delay)
            on_text(piece)
