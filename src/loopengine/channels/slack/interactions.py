"""Slack's interactions, as :mod:`loopengine.channels.slack.routes` describes them: verify, decide, reply.

Imported by the route on the first Slack request (and before a SnapStart snapshot): the rest of the
api never loads Slack's code. The settings and texts are the route module's (``route.SECRET_ENV`` ...),
read at call time.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from loopengine.app.engine import Engine
from loopengine.app.request.resolution import Decider, Resolution
from loopengine.channels.base import NOT_AN_APPROVER
from loopengine.channels.slack import blocks, views
from loopengine.channels.slack import interact as slack
from loopengine.channels.slack import reply as slack_reply
from loopengine.channels.slack import routes as route
from loopengine.channels.slack.interact import SlackAction, SlackRequest, SlackSubmission
from loopengine.channels.slack.send import DEFAULT_API_BASE
from loopengine.channels.slack.values import ANSWER, APPROVE, TEXT
from loopengine.domain.base.errors import ConfigError, DeliveryError, Forbidden, InvalidInput
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.limits import MAX_ANSWER_CHARS
from loopengine.domain.decisions import Approval, Denial, Reply
from loopengine.domain.principals import typed
from loopengine.http import root, secrets, web
from loopengine.http.observability import logger


def interactions(event: BaseProxyEvent) -> Response[Any]:
    """Verify Slack's signature, read the click or submission, decide, tell Slack what happened."""
    body = _raw_body(event.body, bool(event.is_base64_encoded))
    engine = root.engine()
    request = verified(body, event.headers or {}, engine.now())
    logger.set_correlation_id(request.pending_id)
    if isinstance(request, SlackSubmission):
        return web.reply(200, submit(engine, request))
    if request.decision == TEXT:
        message = open_modal(engine, request)
    elif request.decision == ANSWER:
        message = answer_option(engine, request)
    else:
        message = decide(engine, request)
    if message is None:  # the modal is open: the message stays as it is
        return web.reply(200, {})
    if request.response_url is not None:
        send_reply(request.response_url, message)
    return web.reply(200, message)


def signing_secret() -> str | None:
    """The Slack signing secret (None when unset): the environment, or Secrets Manager in AWS.

    Read per request through :func:`loopengine.http.secrets.environ`, whose cache makes that cheap and
    lets a rotated secret take effect without a redeploy. Never logged.
    """
    return secrets.environ().get(route.SECRET_ENV) or None


def allowed_teams() -> frozenset[str]:
    """The workspace ids of ``LOOPENGINE_SLACK_TEAM_ID`` (empty: none, every request is refused)."""
    raw = secrets.environ().get(route.TEAM_ENV) or ""
    return frozenset(t.strip() for t in raw.split(",") if t.strip())


def decider(user_id: str, pending_id: str) -> Decider:
    """The Slack user ``user_id`` deciding the one item ``pending_id``: ``slack:<user id>``."""
    return Decider(typed("slack", user_id), route.CHANNEL, kind="slack", pending_id=pending_id)


def verified(body: bytes, headers: Mapping[str, str], now: float) -> SlackRequest:
    """The request, once it is Slack's, fresh, from an allowed workspace (steps 2-7 above)."""
    timestamp = headers.get("x-slack-request-timestamp")
    signature = headers.get("x-slack-signature")
    try:
        slack.check_freshness(timestamp, signature, now)
        teams = allowed_teams()
        if not teams:
            logger.warning("refused a Slack request: no workspace is configured")
            raise web.HttpError(
                403, "forbidden", f"Slack requests are refused here: {route.TEAM_ENV} is not set"
            )
        secret = signing_secret()
        if secret is None:
            raise web.HttpError(503, "not_configured", "Slack is not configured")
        slack.verify_slack(secret, body, timestamp, signature, now)
    except slack.SlackVerificationError as exc:
        logger.warning("refused a Slack request", extra={"reason": exc.reason.value})
        raise web.HttpError(401, "unauthorized", f"Slack signature check failed: {exc}") from None
    try:
        request = slack.parse_interaction(body)
    except InvalidInput as exc:
        raise web.HttpError(400, "invalid_input", str(exc)) from None
    if request.team_id not in teams:
        logger.warning("refused a Slack request from another workspace")
        raise web.HttpError(403, "forbidden", "this Slack workspace may not decide here")
    return request


def decide(engine: Engine, action: SlackAction) -> JsonDict:
    """Approve or deny; the reply for the message."""
    try:
        verdict = Approval() if action.decision == APPROVE else Denial()
        res = engine.resolve(action.pending_id, verdict, decider(action.user_id, action.pending_id))
    except Forbidden:
        return blocks.ephemeral_message(NOT_AN_APPROVER)
    except InvalidInput as exc:  # e.g. a question's pendingId: these buttons cannot answer it
        return blocks.ephemeral_message(f"This cannot be decided here: {exc}")
    return blocks.replace_message(outcome_text(engine, action, res))


def outcome_text(engine: Engine, action: SlackAction, res: Resolution) -> str:
    """What the message should say after this click: the decision, or what became of the item."""
    if not res.already_resolved:
        verb = "Approved" if action.decision == APPROVE else "Denied"
        return f"{verb} by {blocks.mention(action.user_id)}"
    return blocks.fate_text(engine.item(action.pending_id).fate)


def _question(engine: Engine, action: SlackAction) -> JsonDict | tuple[str, list[Any]]:
    """The open question's text and options, or the reply when there is none to answer."""
    view = engine.item(action.pending_id, decider(action.user_id, action.pending_id), settle=True)
    item = view.item
    if item is None:
        return blocks.replace_message(blocks.fate_text(view.fate))
    if item.kind != "question":
        return blocks.ephemeral_message(
            f"This cannot be answered here: {action.pending_id} is a pending approval"
        )
    options = item.args.get("options")
    return str(item.args.get("question") or ""), options if isinstance(options, list) else []


def answer_option(engine: Engine, action: SlackAction) -> JsonDict:
    """Answer with the option the button names, its text read from the pending item."""
    found = _question(engine, action)
    if isinstance(found, dict):
        return found
    options, n = found[1], action.option
    if n is None or n >= len(options) or not isinstance(options[n], str) or not options[n].strip():
        return blocks.ephemeral_message(
            "This cannot be answered here: that is not one of the question's options"
        )
    answer: str = options[n]
    try:
        res = engine.answer(action.pending_id, Reply(answer), decider(action.user_id, action.pending_id))
    except Forbidden:
        return blocks.ephemeral_message(NOT_AN_APPROVER)
    except InvalidInput as exc:
        return blocks.ephemeral_message(f"This cannot be answered here: {exc}")
    if res.already_resolved:
        return blocks.replace_message(blocks.fate_text(engine.item(action.pending_id).fate))
    return blocks.replace_message(blocks.answered_text(action.user_id, answer))


def open_modal(engine: Engine, action: SlackAction) -> JsonDict | None:
    """Open the answer modal (None: opened); the reply for the message when it cannot be."""
    found = _question(engine, action)
    if isinstance(found, dict):
        return found
    token = secrets.environ().get(route.BOT_TOKEN_ENV) or ""
    elsewhere = f"answer with POST /pending-questions/{action.pending_id}/answer"
    if not token or action.trigger_id is None:
        return blocks.ephemeral_message(f"Typing an answer in Slack is not set up here; {elsewhere}")
    view = blocks.answer_modal(action.pending_id, found[0], action.response_url)
    api_base = secrets.environ().get(route.API_BASE_ENV) or DEFAULT_API_BASE
    try:
        views.open_view(api_base, token, action.trigger_id, view, timeout=route.VIEWS_TIMEOUT)
    except (DeliveryError, ConfigError) as exc:  # its message never holds the token
        logger.warning("could not open the Slack answer modal", extra={"error": str(exc)})
        return blocks.ephemeral_message(f"The answer form could not be opened; try again, or {elsewhere}")
    return None


def submit(engine: Engine, sub: SlackSubmission) -> JsonDict:
    """Answer with the modal's text; the modal's reply (errors, or a notice of what happened)."""
    answer = sub.answer.replace("\r\n", "\n").strip()
    if not answer:
        return blocks.submission_errors(route.NO_ANSWER)
    if len(answer) > MAX_ANSWER_CHARS:
        return blocks.submission_errors(f"At most {MAX_ANSWER_CHARS} characters")
    try:
        res = engine.answer(sub.pending_id, Reply(answer), decider(sub.user_id, sub.pending_id))
    except Forbidden:
        return blocks.submission_errors(NOT_AN_APPROVER)
    except InvalidInput as exc:  # e.g. an approval's pendingId
        return blocks.submission_errors(f"This cannot be answered here: {exc}")
    if res.already_resolved:
        text = blocks.fate_text(engine.item(sub.pending_id).fate)
    else:
        text = blocks.answered_text(sub.user_id, answer)
    if sub.response_url is not None:
        send_reply(sub.response_url, blocks.replace_message(text))
    return blocks.notice_view(text)


def send_reply(response_url: str, message: JsonDict) -> None:
    """POST ``message`` to a ``response_url``; a failure is logged, never raised.

    By now the request has been decided (or refused), so nothing here may turn the 200 into an
    error: Slack would show the user a failure for a decision that stands.
    """
    try:
        slack_reply.post_reply(response_url, message, timeout=route.REPLY_TIMEOUT)
    except DeliveryError as exc:  # its message names the host only, never the URL's path
        logger.warning("could not update the Slack message", extra={"error": str(exc)})
    except Exception as exc:  # a bug must not undo the answer either; the URL stays out of the log
        logger.warning("could not update the Slack message", extra={"error": type(exc).__name__})


def _raw_body(body: Any, is_base64: bool) -> bytes:
    """The exact bytes Slack signed: 413 when too large, 400 when the base64 is broken."""
    raw = body or ""
    if not isinstance(raw, str):
        raise web.HttpError(400, "invalid_input", "request body must be text")
    limit = web.MAX_BODY_BYTES
    if (len(raw) * 3 // 4 if is_base64 else len(raw)) > limit:
        raise web.HttpError(413, "too_large", f"request body is over {limit} bytes")
    try:
        data = base64.b64decode(raw, validate=True) if is_base64 else raw.encode("utf-8")
    except (binascii.Error, ValueError):  # broken base64, or lone surrogates in the text
        raise web.HttpError(400, "invalid_input", "request body could not be decoded") from None
    if len(data) > limit:
        raise web.HttpError(413, "too_large", f"request body is over {limit} bytes")
    return data
