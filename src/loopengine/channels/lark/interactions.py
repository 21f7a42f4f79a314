"""Lark's card callbacks, as :mod:`loopengine.channels.lark.routes` describes them: verify, decide, answer.

Imported by the route on the first Lark request (and before a SnapStart snapshot): the rest of the
api never loads Lark's code. The settings and texts are the route module's, read at call time.
"""

from __future__ import annotations

import hmac
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from loopengine.app.engine import Engine
from loopengine.app.request.resolution import Decider
from loopengine.channels.base import NOT_AN_APPROVER
from loopengine.channels.lark import cards
from loopengine.channels.lark import receive as lark
from loopengine.channels.lark import routes as route
from loopengine.domain.base.errors import Forbidden, InvalidInput
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.decisions import Approval, Denial, Reply
from loopengine.domain.principals import typed
from loopengine.http import root, secrets, web
from loopengine.http.observability import logger


def _setting(name: str) -> str | None:
    return (secrets.environ().get(name) or "").strip() or None


def interactions(event: BaseProxyEvent) -> Response[Any]:
    """Verify the request as Lark signs it, answer a URL verification, or decide a click."""
    if not isinstance(event, APIGatewayProxyEventV2):  # the API's resolver makes nothing else
        raise web.HttpError(400, "invalid_input", "not an HTTP API request")
    body = web.raw_body(event)
    app_id = _setting(route.APP_ID_ENV)
    if app_id is None:
        logger.warning("refused a Lark request: no app id is configured")
        raise web.HttpError(
            403, "forbidden", f"Lark callbacks are refused here: {route.APP_ID_ENV} is not set"
        )
    token = _setting(route.TOKEN_ENV)
    if token is None:
        raise web.HttpError(503, "not_configured", "Lark is not configured")
    headers = event.headers or {}
    seen = {name: headers.get(name.lower()) for name in lark_headers()}
    engine = root.engine()
    try:
        callback = lark.open_callback(
            body, seen, token=token, encrypt_key=_setting(route.ENCRYPT_KEY_ENV), now=engine.now()
        )
    except lark.LarkVerificationError as exc:
        logger.warning("refused a Lark request", extra={"reason": exc.reason.value})
        raise web.HttpError(401, "unauthorized", f"Lark request check failed: {exc}") from None
    except lark.LarkNotConfigured as exc:
        raise web.HttpError(503, "not_configured", str(exc)) from None
    except InvalidInput as exc:
        raise web.HttpError(400, "invalid_input", str(exc)) from None
    if isinstance(callback, lark.LarkChallenge):
        return web.reply(200, {"challenge": callback.challenge})
    if callback.app_id is None or not hmac.compare_digest(callback.app_id.encode(), app_id.encode()):
        logger.warning("refused a Lark click for another app")
        raise web.HttpError(403, "forbidden", "this Lark app may not decide here")
    logger.set_correlation_id(callback.pending_id)
    return web.reply(200, decide(engine, callback))


def lark_headers() -> tuple[str, str, str]:
    """The headers Lark signs with (API Gateway hands them over lower-cased)."""
    return (lark.TIMESTAMP_HEADER, lark.NONCE_HEADER, lark.SIGNATURE_HEADER)


def decide(engine: Engine, action: lark.LarkAction) -> JsonDict:
    """Decide the click; the answer Lark shows (a toast, and the card's replacement when it changed)."""
    who = Decider(typed("lark", action.open_id), route.CHANNEL, kind="lark", pending_id=action.pending_id)
    try:
        if action.decision == cards.ANSWER:
            assert action.answer is not None  # parse_button_value guarantees it
            res = engine.answer(action.pending_id, Reply(action.answer), who)
        else:
            verdict = Approval() if action.decision == cards.APPROVE else Denial()
            res = engine.resolve(action.pending_id, verdict, who)
    except Forbidden:
        return toast("error", NOT_AN_APPROVER)
    except InvalidInput as exc:  # e.g. an answer button on an approval: these buttons cannot do it
        return toast("warning", f"This cannot be decided here: {exc}")
    fate = engine.item(action.pending_id, who).fate
    text = cards.fate_text(fate)
    if res.already_resolved and not text.startswith(cards.ALREADY_RESOLVED):
        text = f"{cards.ALREADY_RESOLVED}: {text[:1].lower()}{text[1:]}"
    reply = toast("info" if res.already_resolved else "success", text)
    reply["card"] = {"type": "raw", "data": cards.fate_card(fate, action.pending_id)}
    return reply


def toast(kind: str, content: str) -> JsonDict:
    """A toast Lark shows the clicker (``success``, ``info``, ``warning`` or ``error``)."""
    return {"toast": {"type": kind, "content": content}}
