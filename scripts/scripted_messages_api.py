"""A stand-in for the Anthropic Messages API that answers from an agent's script.py, streaming.

    python scripts/scripted_messages_api.py --script agents/returns_desk/script.py [--port 0] [--gap 0.15]
    ANTHROPIC_BASE_URL=http://127.0.0.1:PORT ANTHROPIC_API_KEY=standin loopengine dev

``loopengine dev``'s offline model (``LOOPENGINE_MODEL=scripted``) streams a script's text a word at a
time itself. Served through this stand-in instead, the same script answers through the real Anthropic
SDK and the engine's streaming path, as Claude would: ``POST /v1/messages`` with ``"stream": true`` gets
the Server-Sent Events the API sends (``message_start``, ``content_block_*``, ``message_delta``,
``message_stop``), the text cut into 4-character pieces ``--gap`` seconds apart, as a model's tokens
arrive. Any other request gets the whole reply as JSON. Offline: it listens on 127.0.0.1 only and checks
no key. The first line it prints says where it listens.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from loopengine import ModelRequest, ModelResponse
from loopengine.domain.messages import Message
from loopengine.models.scripted import Responder, ScriptedModel

JsonDict = dict[str, Any]
PIECE = 4
"""Characters per text delta (about a token)."""


def load_script(path: Path) -> Responder:
    """The ``respond`` function of the script at ``path``."""
    spec = importlib.util.spec_from_file_location(f"_scripted_{path.parent.name}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    respond: Responder = module.respond
    return respond


def reply(model: ScriptedModel, body: JsonDict) -> JsonDict:
    """The Messages API reply to ``body``, as the script answers it."""
    system = body.get("system", "")
    if isinstance(system, list):
        system = "\n".join(str(b.get("text", "")) for b in system)
    request = ModelRequest(
        model=str(body.get("model", "")),
        system=str(system),
        max_tokens=int(body.get("max_tokens", 1024)),
        messages=[Message.from_dict(m) for m in body.get("messages", [])],
        tools=list(body.get("tools", [])),
    )
    answer: ModelResponse = model.create(request)
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": [b.to_dict() for b in answer.content],
        "stop_reason": answer.stop_reason,
        "stop_sequence": None,
        "usage": answer.usage.as_json(),  # the scripted model's estimate
    }


def events(message: JsonDict) -> Iterator[tuple[str, JsonDict, bool]]:
    """The stream of (event, data, is a text piece) the API sends for ``message``."""
    start = {**message, "content": [], "stop_reason": None}
    yield "message_start", {"type": "message_start", "message": start}, False
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            empty: JsonDict = {"type": "text", "text": ""}
            text = block["text"]
            deltas = [{"type": "text_delta", "text": text[i : i + PIECE]} for i in range(0, len(text), PIECE)]
        else:
            empty = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": empty},
            False,
        )
        for delta in deltas:
            data = {"type": "content_block_delta", "index": index, "delta": delta}
            yield "content_block_delta", data, delta["type"] == "text_delta"
        yield "content_block_stop", {"type": "content_block_stop", "index": index}, False
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield "message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 1}}, False
    yield "message_stop", {"type": "message_stop"}, False


def handler(model: ScriptedModel, gap: float) -> type[BaseHTTPRequestHandler]:
    """The request handler: ``POST /v1/messages`` only."""

    class Messages(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.split("?")[0] != "/v1/messages":
                return self._json(
                    404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}}
                )
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
            try:
                message = reply(model, body)
            except Exception as exc:  # the script failed: an API error the SDK reports
                error = {"type": "invalid_request_error", "message": f"the script failed: {exc}"}
                return self._json(400, {"type": "error", "error": error})
            if not body.get("stream"):
                return self._json(200, message)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for name, data, piece in events(message):
                    if piece and gap:
                        time.sleep(gap)
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

        def _json(self, status: int, data: JsonDict) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    return Messages


def main() -> int:
    """Serve until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", type=Path, required=True, help="the agent's script.py")
    parser.add_argument("--port", type=int, default=8791, help="0: any free port")
    parser.add_argument("--gap", type=float, default=0.15, help="seconds between two text pieces")
    args = parser.parse_args()
    model = ScriptedModel(load_script(args.script))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(model, args.gap))
    server.daemon_threads = True
    print(
        f"Messages API stand-in on http://127.0.0.1:{server.server_port} (answers from {args.script})",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
