"""``POST /integrations/lark/interactions``: a Lark card button decides a pending approval or question.

The route is not behind the API's credentials; Lark's own checks are its authentication
(:mod:`loopengine.channels.lark.receive` says how). Settings, read per request through
:func:`loopengine.http.secrets.environ` (in AWS from Secrets Manager, cached; never logged):

* ``LOOPENGINE_LARK_APP_ID``: the app whose callbacks are accepted. **Unset: every request is 403**
  and nothing is decided (fail closed), the URL verification included;
* ``LOOPENGINE_LARK_VERIFICATION_TOKEN``: the app's Verification Token; unset: 503 ``not_configured``;
* ``LOOPENGINE_LARK_ENCRYPT_KEY`` (recommended): the app's Encrypt Key; set, card actions must be
  signed (``X-Lark-Signature``, ±300 s) and encrypted bodies are decrypted.

The order of checks: the raw body (413 when too large); the app id configured (403); the token
configured (503); signature, timestamp, decryption and token (401, nothing decided; an encrypted
body without a configured key is 503); the URL verification is answered ``{"challenge"}`` here;
a card action's ``header.app_id`` must be ``LOOPENGINE_LARK_APP_ID`` (403); the click must be one on
a loopengine button (400); then it decides, as ``lark:<open_id>`` via ``lark``: the typed
identity is built here from the open_id as text (``typed("lark", open_id)``), so an open_id that
looks like ``group:x`` is ``lark:group:x`` and never a group.

**The answer** is what Lark shows, always 200 once the request is authentic (Lark turns anything
else into an error for the clicker): ``{"toast": {"type", "content"}, "card": {"type": "raw",
"data": <card>}}``. A decision, a late click, a duplicate delivery and an item closed some other way
replace the card (for everyone: the cards are shared) with what became of the item and who decided
it (:func:`loopengine.channels.lark.cards.fate_card`); a click by someone who is not among the
rule's approvers, or a button of the wrong kind, gets a toast only and the card stays for the right
person. Lark waits 3 s for the answer.
"""

from __future__ import annotations

import hmac
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from loopengine.app import api_models as m
from loopengine.app.engine import Engine
from loopengine.app.resolution import Decider
from loopengine.channels.lark import cards
from loopengine.channels.lark import receive as lark
from loopengine.domain.decisions import HumanVerdict
from loopengine.domain.errors import Forbidden, InvalidInput
from loopengine.domain.jsontypes import JsonDict
from loopengine.domain.principals import typed
from loopengine.http import openapi, root, secrets, web
from loopengine.http.observability import logger

router = Router()  # type: ignore[no-untyped-call]

APP_ID_ENV = "LOOPENGINE_LARK_APP_ID"
TOKEN_ENV = "LOOPENGINE_LARK_VERIFICATION_TOKEN"
ENCRYPT_KEY_ENV = "LOOPENGINE_LARK_ENCRYPT_KEY"
CHANNEL = "lark"

NOT_AN_APPROVER = "You are not among the approvers"


def _error(description: str) -> OpenAPIResponse:
    return {"description": description, "content": {"application/json": {"model": m.ErrorBody}}}


RESPONSES: dict[int, OpenAPIResponse] = {
    200: {
        "description": "the URL verification's {challenge}, or what Lark shows: a toast and the card "
        "that replaces the clicked one",
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    **openapi.answers({}, 400, 413, public=True),
    401: _error("the signature, timestamp, encryption or verification token check failed"),
    403: _error("LOOPENGINE_LARK_APP_ID is not set, or the callback is for another app"),
    503: _error("no Verification Token is configured, or the body is encrypted and no Encrypt Key is"),
}


def _setting(name: str) -> str | None:
    return (secrets.environ().get(name) or "").strip() or None


@router.post(
    "/integrations/lark/interactions",
    summary="Lark card callback",
    security=openapi.PUBLIC,
    responses=RESPONSES,
)
def interactions() -> Response[Any]:  # a JSON body (no model: Lark reads it)
    """Verify the request as Lark signs it, answer a URL verification, or decide a click."""
    event = router.current_event
    if not isinstance(event, APIGatewayProxyEventV2):  # the API's resolver makes nothing else
        raise web.HttpError(400, "invalid_input", "not an HTTP API request")
    body = web.raw_body(event)
    app_id = _setting(APP_ID_ENV)
    if app_id is None:
        logger.warning("refused a Lark request: no app id is configured")
        raise web.HttpError(403, "forbidden", f"Lark callbacks are refused here: {APP_ID_ENV} is not set")
    token = _setting(TOKEN_ENV)
    if token is None:
        raise web.HttpError(503, "not_configured", "Lark is not configured")
    headers = event.headers or {}
    seen = {name: headers.get(name.lower()) for name in lark_headers()}
    engine = root.engine()
    try:
        callback = lark.open_callback(
            body, seen, token=token, encrypt_key=_setting(ENCRYPT_KEY_ENV), now=engine.now()
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
    who = Decider(typed("lark", action.open_id), CHANNEL, kind="lark", pending_id=action.pending_id)
    try:
        if action.decision == cards.ANSWER:
            assert action.answer is not None  # parse_button_value guarantees it
            res = engine.answer(action.pending_id, action.answer, who)
        else:
            verdict: HumanVerdict = "approve" if action.decision == cards.APPROVE else "deny"
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
