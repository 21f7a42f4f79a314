"""ModelClient over the Anthropic Messages API, through the official ``anthropic`` SDK.

The SDK costs about a second to import, so it is imported on the first call only: a route that
never talks to the model (a resolve that leaves items outstanding, a health check) never pays it.
Without an explicit ``client`` one is built on first use with ``anthropic.Anthropic()``, which
reads ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` itself.

Every SDK failure becomes a :class:`~loopengine.domain.errors.ModelError`, raised ``from`` the SDK's
exception. The table mirrors the SDK's own retry policy, applied after its retries ran out:

    SDK exception                                   loopengine error
    APIConnectionError, APITimeoutError             RetryableModelError
    APIStatusError with ``x-should-retry: true``    RetryableModelError (the server says so)
    APIStatusError with ``x-should-retry: false``   FatalModelError     (the server says so)
    APIStatusError 408, 409, 429, 5xx (529 too)     RetryableModelError
    APIStatusError other 4xx (400, 401, 403, ...)   FatalModelError
    RetryableError (raised by SDK middleware)       RetryableModelError
    CredentialsError (a broken profile on disk)     FatalModelError
    no credentials at all (the SDK's TypeError)     FatalModelError
    any other SDK error                             FatalModelError

Messages name the status, the API's error type and message and the request id; any credential
the client holds is scrubbed from them.

A request with ``on_text`` streams (``client.messages.stream``): each text delta goes to it as it
arrives, a newline before every text block after the first, and the final message the SDK assembles
is the answer. Failures particular to a stream:

    an ``error`` event inside the 200 stream        by its type: overloaded_error, api_error,
                                                    rate_limit_error, timeout_error retryable;
                                                    any other type FatalModelError
    the connection breaks mid-stream (httpx2)       RetryableModelError
    the stream ends before ``message_stop``         RetryableModelError (never a cut answer)
    ``on_text`` raises (the caller walked away)     raised as it is: the stream is closed
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from loopengine.app.ports import ModelRequest, ModelResponse, TextSink
from loopengine.domain.errors import FatalModelError, RetryableModelError
from loopengine.domain.messages import Block, TextBlock, ToolUseBlock
from loopengine.domain.usage import Usage

if TYPE_CHECKING:
    from anthropic import Anthropic, AnthropicError
    from anthropic.types import Message as ApiMessage
    from anthropic.types import MessageParam, ToolUnionParam
    from anthropic.types.message_create_params import MessageCreateParamsBase

DEFAULT_MAX_RETRIES = 2
"""Retries the SDK makes itself (with backoff) before an error reaches the loop."""

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_RETRYABLE_IN_STREAM = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
_HINTS = {
    401: "check ANTHROPIC_API_KEY",
    403: "the credentials may not use this model or feature",
    404: "is the model name right?",
    413: "the request is too large",
}
_NO_CREDENTIALS = "Could not resolve authentication method"


class AnthropicModel:
    """Answers :class:`ModelRequest` with the Anthropic Messages API.

    ``client`` is used as given (tests pass one over ``httpx2.MockTransport``); without it, one
    is built on first use with ``max_retries`` SDK-level retries.
    """

    def __init__(self, client: Anthropic | None = None, *, max_retries: int = DEFAULT_MAX_RETRIES) -> None:
        self._client = client
        self._max_retries = max_retries

    @property
    def client(self) -> Anthropic:
        """The SDK client, built (and the SDK imported) on first access.

        Building reads credentials and may raise the SDK's ``CredentialsError`` for a broken
        profile; :meth:`create` reports that as ``FatalModelError``.
        """
        if self._client is None:
            import anthropic

            self._client = anthropic.Anthropic(max_retries=self._max_retries)
        return self._client

    def prepare(self) -> None:
        """Import the SDK and build the client now (the caller's thread), not inside :meth:`create`.

        Errors are left for :meth:`create` to report as ``ModelError``.
        """
        try:
            _ = self.client
        except Exception:
            return

    def create(self, request: ModelRequest) -> ModelResponse:
        """Send ``request``; raise ``RetryableModelError`` or ``FatalModelError`` on failure."""
        import anthropic

        messages = cast("list[MessageParam]", [m.to_dict() for m in request.messages])
        params: MessageCreateParamsBase = {
            "model": request.model,
            "system": request.system,
            "max_tokens": request.max_tokens,
            "messages": messages,
        }
        if request.tools:
            params["tools"] = cast("list[ToolUnionParam]", request.tools)
        try:
            if request.on_text is None:
                raw = self.client.messages.create(**params)
            else:
                raw = self._stream(params, request.on_text)
        except anthropic.AnthropicError as exc:
            retryable, message = _classify(exc)
            if self._client is not None:
                message = _redact(message, (self._client.api_key, self._client.auth_token))
            raise (RetryableModelError if retryable else FatalModelError)(message) from exc
        except TypeError as exc:
            # The SDK reports missing credentials as a TypeError raised before any request.
            if _NO_CREDENTIALS not in str(exc):
                raise
            raise FatalModelError(
                "no Anthropic credentials: set ANTHROPIC_API_KEY (or pass a configured client)"
            ) from exc
        return _to_response(raw)

    def _stream(self, params: MessageCreateParamsBase, on_text: TextSink) -> ApiMessage:
        """The message, streamed: its text handed to ``on_text`` piece by piece as it arrives."""
        import httpx2

        texts, message = 0, None
        try:
            with self.client.messages.stream(**params) as stream:
                for event in stream:
                    if event.type == "content_block_start" and event.content_block.type == "text":
                        if texts:
                            on_text("\n")  # Message.text joins text blocks with a newline
                        texts += 1
                        if event.content_block.text:
                            on_text(event.content_block.text)
                    elif event.type == "text":
                        on_text(event.text)
                    elif event.type == "message_stop":
                        message = event.message
        except httpx2.TransportError as exc:
            raise RetryableModelError(f"the Anthropic stream broke off ({type(exc).__name__})") from exc
        if message is None:
            raise RetryableModelError("the Anthropic stream ended before its message did")
        return message


def _to_response(raw: ApiMessage) -> ModelResponse:
    """Keep text and tool_use blocks; thinking and server-tool blocks are dropped."""
    from anthropic.types import TextBlock as ApiTextBlock
    from anthropic.types import ToolUseBlock as ApiToolUseBlock

    blocks: list[Block] = []
    for block in raw.content:
        if isinstance(block, ApiTextBlock):
            blocks.append(TextBlock(text=block.text))
        elif isinstance(block, ApiToolUseBlock):
            blocks.append(ToolUseBlock(id=block.id, name=block.name, input=dict(block.input)))
    usage = Usage.from_json(raw.usage.model_dump(mode="json", exclude_none=True))
    return ModelResponse(content=tuple(blocks), stop_reason=raw.stop_reason or "end_turn", usage=usage)


def _classify(exc: AnthropicError) -> tuple[bool, str]:
    """Whether ``exc`` is worth retrying, and a message for it (see the module docstring)."""
    import anthropic

    if isinstance(exc, anthropic.APIStatusError) and exc.status_code < 400:  # an error event mid-stream
        message = f"the Anthropic stream reported {exc.type or 'an error'}: {exc.api_message or 'no message'}"
        if exc.request_id:
            message += f" [request-id {exc.request_id}]"
        return exc.type in _RETRYABLE_IN_STREAM, message
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        message = f"Anthropic API answered {status}"
        if exc.type:
            message += f" {exc.type}"
        message += f": {exc.api_message or 'no error message'}"
        if status in _HINTS:
            message += f" ({_HINTS[status]})"
        if exc.request_id:
            message += f" [request-id {exc.request_id}]"
        should_retry = exc.response.headers.get("x-should-retry")
        if should_retry in ("true", "false"):
            return should_retry == "true", message
        return status in _RETRYABLE_STATUS or status >= 500, message
    if isinstance(exc, anthropic.APITimeoutError):
        return True, "Anthropic API request timed out"
    if isinstance(exc, anthropic.APIConnectionError):
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        return True, f"could not reach the Anthropic API{cause}"
    if isinstance(exc, anthropic.RetryableError):
        return True, f"Anthropic request failed, worth retrying: {exc}"
    return False, f"Anthropic request failed ({type(exc).__name__}): {exc}"


def _redact(message: str, secrets: Iterable[str | None]) -> str:
    """Replace every non-empty secret in ``message``."""
    for secret in secrets:
        if secret:
            message = message.replace(secret, "[redacted]")
    return message
