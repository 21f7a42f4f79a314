"""A stand-in of the Messages API that has a context window: it counts, refuses and bills tokens.

:class:`WindowedMessagesApi` answers ``POST /v1/messages`` through the anthropic SDK's own transport
(``httpx2.MockTransport``), streaming as the API streams (:mod:`tests.anthropic_sse`). For every request
it counts the prompt's tokens the way the API counts a rendered prompt (:func:`count_tokens`: the
system prompt, the tool definitions plus the API's tool-use preamble, and each message's text, tool
calls and results, with a few tokens per message), and then:

- refuses a prompt longer than the window exactly as the API does: 400 ``invalid_request_error``,
  ``prompt is too long: N tokens > M maximum``; and a prompt that leaves no room for ``max_tokens``
  with the API's ``input length and `max_tokens` exceed context limit`` message;
- bills it: the reply's ``usage`` has ``input_tokens`` (the count) and ``output_tokens`` (the reply's).

What it answers is up to ``brain`` (a function of the request body). The tokenizer is a fixed
stand-in for Claude's (which is not public): words of up to 8 letters, numbers of up to 3 digits and
pairs of other characters are a token each, a leading space included: about 4 characters a token on
English text and 2.5 to 3 on JSON, as the API's counts run.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

import httpx2

from tests.anthropic_sse import sse_body

JsonDict = dict[str, Any]
Brain = Callable[[JsonDict], tuple[list[JsonDict], str]]
"""What the model says to a request body: its content blocks and stop reason."""

_TOKEN = re.compile(r" ?[A-Za-z]{1,8}| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]{1,2}|\s+")
TOOL_PREAMBLE = 346
"""Tokens the API adds to a request with tools (its tool-use system prompt, auto tool choice)."""
PER_MESSAGE = 3
PER_BLOCK = 3


def tokens(text: str) -> int:
    """The stand-in tokenizer's count for ``text``."""
    return len(_TOKEN.findall(text))


def count_tokens(body: JsonDict) -> int:
    """The prompt's tokens as the API counts them: what the model reads, not the JSON around it."""
    system = body.get("system") or ""
    if isinstance(system, list):
        system = "\n".join(str(b.get("text", "")) for b in system)
    total = tokens(system)
    tools = body.get("tools") or []
    if tools:
        total += TOOL_PREAMBLE + sum(tokens(json.dumps(t)) for t in tools)
    for message in body.get("messages", []):
        total += PER_MESSAGE
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            total += PER_BLOCK
            if block["type"] == "text":
                total += tokens(block["text"])
            elif block["type"] == "tool_use":
                total += tokens(block["name"]) + tokens(json.dumps(block["input"]))
            elif block["type"] == "tool_result":
                inner = block.get("content", "")
                total += tokens(inner if isinstance(inner, str) else json.dumps(inner))
    return total


class WindowedMessagesApi:
    """The Messages API with a ``window``-token context: every request counted, refused or billed.

    ``bodies``: every request received; ``counts``: each one's prompt tokens; ``refused``: the error
    messages it answered; ``usage``: the ``usage`` of each reply, in order.
    """

    def __init__(self, window: int, brain: Brain) -> None:
        self.window, self.brain = window, brain
        self.bodies: list[JsonDict] = []
        self.counts: list[int] = []
        self.refused: list[str] = []
        self.usage: list[JsonDict] = []
        self._lock = threading.Lock()

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        prompt = count_tokens(body)
        with self._lock:
            self.bodies.append(body)
            self.counts.append(prompt)
        if prompt > self.window - 1:
            return self._refuse(f"prompt is too long: {prompt} tokens > {self.window - 1} maximum")
        if prompt + int(body["max_tokens"]) > self.window:
            return self._refuse(
                f"input length and `max_tokens` exceed context limit: {prompt} + {body['max_tokens']} > "
                f"{self.window}, decrease input length or `max_tokens` and try again"
            )
        content, stop = self.brain(body)
        said = sum(tokens(b.get("text", "")) + tokens(json.dumps(b.get("input", {}))) for b in content)
        usage = {"input_tokens": prompt, "output_tokens": max(1, said)}
        with self._lock:
            self.usage.append(usage)
        reply = {
            "id": f"msg_{len(self.bodies):06d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if body.get("stream"):
            headers = {"content-type": "text/event-stream", "request-id": f"req_{len(self.bodies)}"}
            return httpx2.Response(200, headers=headers, content=sse_body(reply, piece=64))
        return httpx2.Response(200, json=reply)

    def _refuse(self, message: str) -> httpx2.Response:
        with self._lock:
            self.refused.append(message)
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        return httpx2.Response(400, json=error, headers={"request-id": "req_refused"})

    def client(self) -> Any:
        """An ``anthropic.Anthropic`` client whose requests this stand-in answers (close it after)."""
        import anthropic

        transport = httpx2.MockTransport(self)
        return anthropic.Anthropic(
            api_key="sk-ant-standin", max_retries=0, http_client=httpx2.Client(transport=transport)
        )
