"""A local stand-in of the Bedrock runtime's two Claude endpoints, for the SDK's own ``AnthropicBedrock``.

``POST /model/{modelId}/invoke`` answers the Messages API reply as JSON; ``POST
/model/{modelId}/invoke-with-response-stream`` answers the same reply as Bedrock streams it: the
Messages API's events (:func:`tests.anthropic_sse.sse_events`), each the base64 ``bytes`` of a
``chunk`` event in AWS's binary event-stream framing (content type
``application/vnd.amazon.eventstream``; prelude, headers, payload and both CRCs, encoded by moto's
encoder, the one its own Bedrock-style streams use), the last one carrying
``amazon-bedrock-invocationMetrics`` as Bedrock's does. ``fail_with`` ends a stream with an
exception frame instead (``throttlingException``, ``validationException``, ...).

Like Bedrock it takes the model from the path (a body carrying ``model`` or ``stream`` is refused, as
Bedrock's schema refuses them), wants an ``anthropic_version`` in the body and a SigV4 ``Authorization``
header for service ``bedrock`` in the client's region. ``received`` keeps each request: the path's
model id, the headers and the body. With a ``meter`` the reply's usage is the request's bill.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from moto.core.eventstream import EventStreamEncoder

from tests.anthropic_sse import sse_events
from tests.token_meter import TokenMeter, TooManyBreakpoints

JsonDict = dict[str, Any]
STREAM_TYPE = "application/vnd.amazon.eventstream"


@dataclass(frozen=True)
class Received:
    """One request as the stand-in saw it."""

    action: str  # invoke | invoke-with-response-stream
    model_id: str
    headers: dict[str, str]
    body: JsonDict


def chunk(data: JsonDict) -> bytes:
    """One Messages API event as a Bedrock ``chunk`` frame."""
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(data).encode()).decode()}).encode()
    headers = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
    return EventStreamEncoder().encode_message(headers, payload)


def exception(kind: str, message: str) -> bytes:
    """An exception frame (``kind``: a ResponseStream member such as ``throttlingException``)."""
    headers = {":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"}
    return EventStreamEncoder().encode_message(headers, json.dumps({"message": message}).encode())


class BedrockRuntime:
    """The stand-in on 127.0.0.1 (``url``): ``reply(n, body)`` answers the n-th request (1-based)."""

    def __init__(
        self,
        reply: Callable[[int, JsonDict], JsonDict],
        region: str = "eu-west-1",
        meter: TokenMeter | None = None,
        piece: int = 4,
        fail_with: tuple[str, str] | None = None,
    ) -> None:
        self.reply, self.region, self.meter, self.piece = reply, region, meter, piece
        self.fail_with = fail_with
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def refusal(self, headers: dict[str, str], body: JsonDict) -> tuple[int, str, str] | None:
        """What Bedrock would refuse the request for (status, error type, message), if anything."""
        auth = headers.get("authorization", "")
        scope = f"/{self.region}/bedrock/aws4_request"
        if (
            not auth.startswith("AWS4-HMAC-SHA256 Credential=")
            or scope not in auth
            or "Signature=" not in auth
        ):
            return (
                403,
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        if "model" in body or "stream" in body:
            return 400, "ValidationException", "Malformed input request: extraneous key [model/stream]"
        if not isinstance(body.get("anthropic_version"), str) or not body["anthropic_version"]:
            return 400, "ValidationException", "Malformed input request: anthropic_version is required"
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        runtime = self

        class Handle(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                parts = self.path.split("?")[0].split("/")
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                if (
                    len(parts) != 4
                    or parts[1] != "model"
                    or parts[3] not in ("invoke", "invoke-with-response-stream")
                ):
                    return self._json(404, {"message": "unknown operation"}, "UnknownOperationException")
                headers = {k.lower(): v for k, v in self.headers.items()}
                got = Received(parts[3], urllib.parse.unquote(parts[2]), headers, body)
                with runtime._lock:
                    runtime.received.append(got)
                    n = len(runtime.received)
                refused = runtime.refusal(headers, body)
                if refused is not None:
                    status, kind, message = refused
                    return self._json(status, {"message": message}, kind)
                answer = runtime.reply(n, body)
                if runtime.meter is not None:
                    try:
                        answer = {
                            **answer,
                            "usage": runtime.meter.bill({**body, "model": got.model_id}, answer),
                        }
                    except TooManyBreakpoints as exc:
                        return self._json(400, {"message": str(exc)}, "ValidationException")
                if got.action == "invoke":
                    return self._json(200, answer)
                self.send_response(200)
                self.send_header("content-type", STREAM_TYPE)
                self.send_header("x-amzn-requestid", f"req-{n}")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                events = [data for _name, data in sse_events(answer, runtime.piece)]
                events[-1] = {
                    **events[-1],
                    "amazon-bedrock-invocationMetrics": {
                        "inputTokenCount": answer["usage"]["input_tokens"],
                        "outputTokenCount": answer["usage"]["output_tokens"],
                        "invocationLatency": 5,
                        "firstByteLatency": 1,
                    },
                }
                frames = [chunk(e) for e in events]
                if runtime.fail_with is not None:
                    frames = [*frames[:3], exception(*runtime.fail_with)]
                for frame in frames:
                    self.wfile.write(frame)
                    self.wfile.flush()

            def _json(self, status: int, data: JsonDict, kind: str | None = None) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                if kind is not None:
                    self.send_header(
                        "x-amzn-errortype", f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"
                    )
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handle

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
