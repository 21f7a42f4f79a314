"""A local stand-in for Slack's Web API (``chat.postMessage``, ``views.open``) that checks what it is sent.

It listens on 127.0.0.1 and answers as Slack documents: HTTP 200 with ``{"ok": true, ...}``, or
``{"ok": false, "error": "<code>"}`` when the request breaks a documented rule. What it checks:

* every method: ``POST``, ``Authorization: Bearer <the bot token>`` (else ``not_authed`` /
  ``invalid_auth``), a JSON body (``Content-Type: application/json``, else ``invalid_form_data``);
* ``chat.postMessage``: a ``channel``, ``text`` or ``blocks``; at most 50 blocks; a section's text at
  most 3000 characters; an ``actions`` block at most 25 elements, with unique ``action_id`` s (at most
  255 characters), a button's text ``plain_text`` of at most 75 and its ``value`` at most 2000;
* ``views.open``: a ``trigger_id`` this stand-in issued (:meth:`SlackApi.trigger`), used once
  (``exchanged_trigger_id``) within 3 s (``expired_trigger_id``), and a modal ``view``: ``type``
  ``modal``; ``title`` (and ``submit`` / ``close``) ``plain_text`` of at most 24 characters;
  ``submit`` present when there is an ``input`` block; 1-100 blocks; ``private_metadata`` at most
  3000 characters; ``callback_id`` at most 255; an input's ``label`` ``plain_text`` and its
  ``plain_text_input`` element with an ``action_id`` and ``max_length`` at most 3000.

A request that breaks one of these is answered ``invalid_arguments`` with the rule in
``response_metadata.messages`` and recorded in :attr:`SlackApi.refused`; every request is recorded
in :attr:`SlackApi.requests`.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from loopengine.channels.slack.interact import sign_slack
from tests.handler_support import load_event, with_body
from tests.http_support import Answer, PostServer

TRIGGER_SECONDS = 3.0


@dataclass(frozen=True)
class ApiRequest:
    """One request the stand-in got."""

    method: str
    headers: dict[str, str]
    body: Any


class _Broken(Exception):
    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise _Broken("invalid_arguments", message)


def _plain(obj: Any, where: str, limit: int) -> None:
    _check(isinstance(obj, dict) and obj.get("type") == "plain_text", f"{where} must be plain_text")
    text = obj.get("text")
    _check(isinstance(text, str) and 0 < len(text) <= limit, f"{where} must be 1-{limit} characters")


def check_blocks(blocks: Any, limit: int) -> None:
    """The block rules both surfaces share (see the module docstring)."""
    _check(isinstance(blocks, list) and 0 < len(blocks) <= limit, f"blocks must be 1-{limit}")
    for block in blocks:
        _check(isinstance(block, dict) and isinstance(block.get("type"), str), "a block needs a type")
        if block["type"] == "section":
            text = block.get("text", {}).get("text")
            _check(isinstance(text, str) and len(text) <= 3000, "a section's text is at most 3000")
        if block["type"] == "actions":
            elements = block.get("elements")
            _check(isinstance(elements, list) and 0 < len(elements) <= 25, "actions hold 1-25 elements")
            ids = [e.get("action_id") for e in elements]
            _check(len(set(ids)) == len(ids), "action_ids must be unique within a block")
            for element in elements:
                _check(
                    isinstance(element.get("action_id"), str) and len(element["action_id"]) <= 255,
                    "action_id",
                )
                if element.get("type") == "button":
                    _plain(element.get("text"), "a button's text", 75)
                    value = element.get("value")
                    _check(
                        value is None or (isinstance(value, str) and len(value) <= 2000), "a button's value"
                    )


def check_modal(view: Any) -> None:
    """A modal view as ``views.open`` takes it (see the module docstring)."""
    _check(isinstance(view, dict) and view.get("type") == "modal", "view.type must be modal")
    _plain(view.get("title"), "view.title", 24)
    for optional in ("submit", "close"):
        if optional in view:
            _plain(view[optional], f"view.{optional}", 24)
    check_blocks(view.get("blocks"), 100)
    inputs = [b for b in view["blocks"] if b["type"] == "input"]
    _check(not inputs or "submit" in view, "submit is required with an input block")
    for block in inputs:
        _plain(block.get("label"), "an input's label", 2000)
        element = block.get("element") or {}
        _check(element.get("type") == "plain_text_input", "the input element must be plain_text_input")
        _check(isinstance(element.get("action_id"), str), "the input element needs an action_id")
        _check(0 < element.get("max_length", 3000) <= 3000, "max_length is at most 3000")
    metadata = view.get("private_metadata", "")
    _check(isinstance(metadata, str) and len(metadata) <= 3000, "private_metadata is at most 3000")
    callback = view.get("callback_id", "")
    _check(isinstance(callback, str) and len(callback) <= 255, "callback_id is at most 255")


@dataclass
class SlackApi(PostServer):
    """The stand-in (a context manager); ``base`` is what ``api_base`` should be."""

    token: str
    requests: list[ApiRequest] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    triggers: dict[str, float] = field(default_factory=dict)
    exchanged: set[str] = field(default_factory=set)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        PostServer.__init__(self)

    @property
    def base(self) -> str:
        return f"{self.origin}/api"

    def respond(self, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        return Answer(json.dumps(self.handle(path.rsplit("/", 1)[-1], headers, raw)).encode())

    def trigger(self) -> str:
        """A fresh trigger_id, as Slack puts in a click's payload (good for 3 s, once)."""
        made = f"{next(self._ids)}.98765.abcd2358fdea"
        self.triggers[made] = time.monotonic()
        return made

    def calls(self, method: str) -> list[ApiRequest]:
        return [r for r in self.requests if r.method == method]

    def handle(self, method: str, headers: dict[str, str], raw: bytes) -> dict[str, Any]:
        try:
            body = self._body(headers, raw)
            self.requests.append(ApiRequest(method, headers, body))
            if method == "chat.postMessage":
                return self._post_message(body)
            if method == "views.open":
                return self._open(body)
            raise _Broken("unknown_method")
        except _Broken as broken:
            self.refused.append((method, str(broken)))
            answer: dict[str, Any] = {"ok": False, "error": broken.code}
            if broken.code == "invalid_arguments":
                answer["response_metadata"] = {"messages": [f"[ERROR] {broken}"]}
            return answer

    def _body(self, headers: dict[str, str], raw: bytes) -> Any:
        auth = headers.get("authorization", "")
        if not auth:
            raise _Broken("not_authed")
        if auth != f"Bearer {self.token}":
            raise _Broken("invalid_auth")
        if not headers.get("content-type", "").startswith("application/json"):
            raise _Broken("invalid_form_data")
        try:
            return json.loads(raw)
        except ValueError:
            raise _Broken("invalid_json") from None

    def _post_message(self, body: Any) -> dict[str, Any]:
        _check(isinstance(body, dict) and isinstance(body.get("channel"), str), "channel is required")
        _check(bool(body.get("text") or body.get("blocks")), "text or blocks is required")
        if "blocks" in body:
            check_blocks(body["blocks"], 50)
        return {"ok": True, "channel": body["channel"], "ts": f"{time.time():.6f}"}

    def _open(self, body: Any) -> dict[str, Any]:
        _check(isinstance(body, dict), "the body must be an object")
        trigger = body.get("trigger_id")
        if trigger in self.exchanged:
            raise _Broken("exchanged_trigger_id")
        if trigger not in self.triggers:
            raise _Broken("invalid_trigger_id")
        issued = self.triggers.pop(trigger)
        self.exchanged.add(trigger)
        if time.monotonic() - issued > TRIGGER_SECONDS:
            raise _Broken("expired_trigger_id")
        check_modal(body.get("view"))
        return {"ok": True, "view": {**body["view"], "id": f"V{next(self._ids):08d}"}}


# -- a click's response_url, played by a local receiver ---------------------------------------

REPLY_PATH = "/actions/T0/1/s3cr3tT0k3n"  # a response_url's path is its credential


@dataclass(frozen=True)
class Posted:
    """One POST the receiver got."""

    path: str
    content_type: str
    message: dict[str, Any]


class ResponseUrls(PostServer):
    """Slack's response_url endpoint on 127.0.0.1: records every POST, answers ``status`` ``answer``."""

    def __init__(self) -> None:
        super().__init__()
        self.posted: list[Posted] = []
        self.status, self.answer, self.delay = 200, b"ok", 0.0

    @property
    def url(self) -> str:
        return f"{self.origin}{REPLY_PATH}"

    def respond(self, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        self.posted.append(Posted(path, headers.get("content-type", ""), json.loads(raw)))
        time.sleep(self.delay)  # recorded first, so a late answer never lands in the next test
        return Answer(self.answer, self.status, "text/plain")

    def reset(self) -> None:
        self.posted.clear()
        self.status, self.answer, self.delay = 200, b"ok", 0.0


# -- signed requests to the interactions route ----------------------------------------------------


def signed_event(payload: dict[str, Any], secret: str, now: int) -> dict[str, Any]:
    """events/slack_interaction.json carrying ``payload`` as Slack's form post, signed at ``now``."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    event = with_body(load_event("slack_interaction"), body.decode())
    event["isBase64Encoded"] = False
    event["headers"] = {
        **event["headers"],
        "content-length": str(len(body)),
        "x-slack-request-timestamp": str(now),
        "x-slack-signature": sign_slack(secret, body, now),
    }
    return event
