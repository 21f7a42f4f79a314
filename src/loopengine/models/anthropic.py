"""ModelClient over the Anthropic Messages API (or Claude on Amazon Bedrock), through the ``anthropic`` SDK.

The SDK costs about a second to import, so it is imported on the first call only: a route that
never talks to the model (a resolve that leaves items outstanding, a health check) never pays it.
Without an explicit ``client`` one is built on first use with ``anthropic.Anthropic()``, which
reads ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` itself.

Every SDK failure becomes a :class:`~loopengine.domain.base.errors.ModelError`, raised ``from`` the SDK's
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

**Bedrock.** Given the SDK's ``AnthropicBedrock`` client (built by :func:`bedrock_client`: the function's
IAM role, its region from ``AWS_REGION``, no API key), the same requests go to Bedrock's
``invoke`` / ``invoke-with-response-stream`` endpoints, with everything below unchanged; ``model``
replaces each request's model with the Bedrock model id or inference profile the deployment may call.
Bedrock's own stream errors (``throttlingException``, ``modelStreamErrorException``, ...) are sorted
like the API's (``validationException`` is not worth retrying; the others are).

**Prompt caching** (``cache``, an agent's ``prompt_cache:``; on by default): the request marks
``cache_control`` breakpoints, at most three of the API's four:

    the system prompt (tools + system: the   what every call of the agent shares; on the last
    stable prefix)                           tool instead when there is no system prompt
    the newest message's last block          this call's whole prompt, for the next call to read
    the last block of the message before     where the previous call put its newest breakpoint:
    the newest assistant message             an exact hit however many blocks came since

so each model call of a turn (and the first of the next turn) reads the previous call's prompt from
the cache and writes only what was added since. ``ttl: 1h`` marks every breakpoint
``{"type": "ephemeral", "ttl": "1h"}``. The response's ``usage``
(:class:`~loopengine.domain.tokens.usage.Usage`) says what was written and read.

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
from loopengine.domain.base.errors import ConfigError, FatalModelError, RetryableModelError
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.messages import Block, TextBlock, ToolUseBlock
from loopengine.domain.tokens.usage import DEFAULT_PROMPT_CACHE, PromptCache, Usage

if TYPE_CHECKING:
    from anthropic import Anthropic, AnthropicBedrock, AnthropicError, APIStatusError
    from anthropic.types import Message as ApiMessage
    from anthropic.types import MessageParam, TextBlockParam, ToolUnionParam
    from anthropic.types.message_create_params import MessageCreateParamsBase

    SdkClient = Anthropic | AnthropicBedrock

DEFAULT_MAX_RETRIES = 2
"""Retries the SDK makes itself (with backoff) before an error reaches the loop."""

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_RETRYABLE_IN_STREAM = frozenset(
    {
        "overloaded_error",
        "api_error",
        "rate_limit_error",
        "timeout_error",
        # Bedrock's exception frames, by their event names (as the SDK's Bedrock decoder reports them)
        "throttlingException",
        "serviceUnavailableException",
        "internalServerException",
        "modelStreamErrorException",
        "modelTimeoutException",
    }
)
MAX_BREAKPOINTS = 4
"""The Messages API refuses a request with more ``cache_control`` breakpoints than this."""
_HINTS = {
    401: "check ANTHROPIC_API_KEY",
    403: "the credentials may not use this model or feature",
    404: "is the model name right?",
    413: "the request is too large",
}
_BEDROCK_HINTS = {
    403: "the function's role may not invoke this model: see the template's BedrockModelId",
    404: "is the model id or inference profile right, and enabled in this region?",
    413: "the request is too large",
}
BEDROCK = "Bedrock runtime"
"""How errors name Bedrock (:attr:`AnthropicModel.service`)."""
_NO_CREDENTIALS = "Could not resolve authentication method"
_NO_AWS_CREDENTIALS = "Could not resolve AWS credentials"


def bedrock_client(
    region: str | None, base_url: str | None = None, max_retries: int = DEFAULT_MAX_RETRIES
) -> AnthropicBedrock:
    """The SDK's Bedrock client: AWS credentials from the default chain (the function's role), no API key.

    ``region``: ``AWS_REGION`` (Lambda sets it); ``base_url``: another endpoint than Bedrock's own
    (``ANTHROPIC_BEDROCK_BASE_URL``: a VPC endpoint, or a local stand-in in tests).
    """
    if not region:
        raise ConfigError("provider bedrock needs a region: set AWS_REGION (Lambda sets it for the function)")
    from anthropic import AnthropicBedrock

    return AnthropicBedrock(aws_region=region, base_url=base_url or None, max_retries=max_retries)


class AnthropicModel:
    """Answers :class:`ModelRequest` with the Anthropic Messages API (or Bedrock, given its client).

    ``client`` is used as given (tests pass one over ``httpx2.MockTransport``); without it, one
    is built on first use with ``max_retries`` SDK-level retries. ``cache``: the agent's
    ``prompt_cache`` (default on, 5 minutes); ``model``: a model that replaces every request's (a
    deployment's Bedrock model id); ``service``: how errors name the other end.
    """

    def __init__(
        self,
        client: SdkClient | None = None,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        cache: PromptCache = DEFAULT_PROMPT_CACHE,
        model: str | None = None,
        service: str = "Anthropic API",
    ) -> None:
        self._client = client
        self._max_retries = max_retries
        self.cache, self.model, self.service = cache, model, service

    @property
    def client(self) -> SdkClient:
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

    def params(self, request: ModelRequest) -> MessageCreateParamsBase:
        """The SDK's parameters for ``request``: its model (or :attr:`model`), and the cache breakpoints."""
        messages = [m.to_dict() for m in request.messages]
        tools = [dict(t) for t in request.tools]
        system: str | list[TextBlockParam] = request.system
        if self.cache.enabled:
            control = self.cache.cache_control()
            if request.system:
                system = [{"type": "text", "text": request.system, "cache_control": control}]  # type: ignore[typeddict-item]
            elif tools:
                tools[-1]["cache_control"] = control
            for index in breakpoints(messages):
                blocks = messages[index]["content"]
                blocks[-1] = {**blocks[-1], "cache_control": control}
        params: MessageCreateParamsBase = {
            "model": self.model or request.model,
            "system": system,
            "max_tokens": request.max_tokens,
            "messages": cast("list[MessageParam]", messages),
        }
        if tools:
            params["tools"] = cast("list[ToolUnionParam]", tools)
        return params

    def create(self, request: ModelRequest) -> ModelResponse:
        """Send ``request``; raise ``RetryableModelError`` or ``FatalModelError`` on failure."""
        import anthropic

        params = self.params(request)
        try:
            if request.on_text is None:
                raw = self.client.messages.create(**params)
            else:
                raw = self._stream(params, request.on_text)
        except anthropic.AnthropicError as exc:
            retryable, message = _classify(exc, self.service)
            raise (RetryableModelError if retryable else FatalModelError)(self._redacted(message)) from exc
        except TypeError as exc:
            # The SDK reports missing credentials as a TypeError raised before any request.
            if _NO_CREDENTIALS not in str(exc):
                raise
            raise FatalModelError(
                "no Anthropic credentials: set ANTHROPIC_API_KEY (or pass a configured client)"
            ) from exc
        except RuntimeError as exc:
            # The Bedrock client signs each request; with no AWS credentials it raises this.
            if _NO_AWS_CREDENTIALS not in str(exc):
                raise
            raise FatalModelError(
                f"no AWS credentials for {self.service}: the function's role, or AWS_* variables locally"
            ) from exc
        return _to_response(raw)

    def _redacted(self, message: str) -> str:
        """``message`` with every credential the client holds replaced."""
        if self._client is None:
            return message
        names = ("api_key", "auth_token", "aws_secret_key", "aws_session_token", "aws_access_key")
        return _redact(message, (getattr(self._client, name, None) for name in names))

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
            raise RetryableModelError(f"the {self.service} stream broke off ({type(exc).__name__})") from exc
        if message is None:
            raise RetryableModelError(f"the {self.service} stream ended before its message did")
        return message


def breakpoints(messages: list[JsonDict]) -> list[int]:
    """The messages whose last block carries a cache breakpoint (see the module docstring), at most two.

    The newest message, and the one before the newest assistant message (the previous call's newest).
    """
    marked: list[int] = []
    if messages and messages[-1].get("content"):
        marked.append(len(messages) - 1)
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    previous = assistants[-1] - 1 if assistants else -1
    if previous >= 0 and previous not in marked and messages[previous].get("content"):
        marked.append(previous)
    assert len(marked) + 1 <= MAX_BREAKPOINTS
    return marked


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
    u = raw.usage
    usage = Usage(
        u.input_tokens or 0,
        u.output_tokens or 0,
        u.cache_creation_input_tokens or 0,
        u.cache_read_input_tokens or 0,
    )
    return ModelResponse(content=tuple(blocks), stop_reason=raw.stop_reason or "end_turn", usage=usage)


def _classify(exc: AnthropicError, service: str = "Anthropic API") -> tuple[bool, str]:
    """Whether ``exc`` is worth retrying, and a message for it (see the module docstring)."""
    import anthropic

    if isinstance(exc, anthropic.APIStatusError) and exc.status_code < 400:  # an error event mid-stream
        message = f"the {service} stream reported {exc.type or 'an error'}: {exc.api_message or 'no message'}"
        if exc.request_id:
            message += f" [request-id {exc.request_id}]"
        return exc.type in _RETRYABLE_IN_STREAM, message
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        kind, text = _error_of(exc)
        message = f"{service} answered {status}"
        if kind:
            message += f" {kind}"
        message += f": {text or 'no error message'}"
        hints = _BEDROCK_HINTS if service == BEDROCK else _HINTS
        if status in hints:
            message += f" ({hints[status]})"
        if exc.request_id:
            message += f" [request-id {exc.request_id}]"
        should_retry = exc.response.headers.get("x-should-retry")
        if should_retry in ("true", "false"):
            return should_retry == "true", message
        return status in _RETRYABLE_STATUS or status >= 500, message
    if isinstance(exc, anthropic.APITimeoutError):
        return True, f"{service} request timed out"
    if isinstance(exc, anthropic.APIConnectionError):
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        return True, f"could not reach the {service}{cause}"
    if isinstance(exc, anthropic.RetryableError):
        return True, f"{service} request failed, worth retrying: {exc}"
    return False, f"{service} request failed ({type(exc).__name__}): {exc}"


def _error_of(exc: APIStatusError) -> tuple[str | None, str | None]:
    """The error's type and message: the API's ``error`` object, else Bedrock's header and ``message``."""
    kind: str | None = exc.type
    text = exc.api_message
    if kind is None:
        amzn = exc.response.headers.get("x-amzn-errortype")
        kind = amzn.split(":", 1)[0] if amzn else None
    if text is None and isinstance(exc.body, dict) and isinstance(exc.body.get("message"), str):
        text = exc.body["message"]
    return kind, text


def _redact(message: str, secrets: Iterable[str | None]) -> str:
    """Replace every non-empty secret in ``message``."""
    for secret in secrets:
        if secret:
            message = message.replace(secret, "[redacted]")
    return message
