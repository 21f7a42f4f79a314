"""``POST /integrations/slack/interactions``: Slack buttons and the answer modal decide pending items.

The route is not behind the API's credentials; Slack's request signature is its authentication
(``LOOPENGINE_SLACK_SIGNING_SECRET``, the app's Signing Secret). The order of checks:

1. the raw body (base64-decoded when API Gateway encoded it), 413 when over the size limit;
2. the signature headers must be present, well formed and fresh (±300 s), else 401. These need
   no secret, so a request that cannot be a current Slack request is refused even where Slack is
   not configured;
3. ``LOOPENGINE_SLACK_TEAM_ID`` (comma-separated workspace ids) unset: 403 and nothing is decided
   (fail closed: one Slack app, and so one signing secret, can be installed in any workspace);
4. no signing secret configured: 503 ``not_configured`` (the secret is read per request and never
   logged);
5. the HMAC must match, else 401, and nothing is decided;
6. the payload must be a click on a loopengine button or a submission of its answer modal
   (:mod:`loopengine.channels.slack.interact`), else 400 JSON;
7. its ``team.id`` must be one of ``LOOPENGINE_SLACK_TEAM_ID``'s, else 403, nothing decided;
8. it decides as ``slack:<user id>`` via ``slack`` (:func:`decider`; the typed identity is built
   from the user id as text, so an id that looks like ``group:x`` is ``slack:group:x``), scoped
   to the one item the button or modal names.

What a request asks (:mod:`loopengine.channels.slack.values`): Approve / Deny; an option of a
question (the answer is that option's text *as the pending item holds it*); "Type an answer",
which opens the answer modal with ``views.open`` (the bot token ``LOOPENGINE_SLACK_BOT_TOKEN``;
``LOOPENGINE_SLACK_API_BASE`` for another API base, default Slack's); the modal's
``view_submission``, which answers with the typed text.

Answers to Slack: everything Slack should show is a 200, because Slack turns any other status into
an error for the user. A decision, a late click and the reason an item is no longer open
(superseded, cancelled, expired) replace the original message, so its buttons go away; a click by
someone who is not among the rule's approvers, or on an item these buttons cannot decide, gets an
ephemeral answer and the message stays for the right person. A submission is answered in the modal:
``errors`` under the input (nothing typed, not an approver), or the modal becomes a notice (the
answer, or what became of the item when it came too late). 400/401/403/413/503 are for requests
that are not interactions Slack should show at all.

For ``block_actions`` Slack does not read the 200's body: the message changes only when the same
reply is POSTed to the click's ``response_url`` (:mod:`loopengine.channels.slack.reply`), which is
done after deciding and before answering (for a submission: to the message's ``response_url`` the
modal carries). The body still carries the reply (for tools and tests that read it). A failed POST
is logged without the URL (it is a credential) and changes nothing: the decision stands and Slack
still gets its 200. Slack wants the answer within 3 s, so the POSTs have short timeouts.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from loopengine.app import api_models as m
from loopengine.app.engine import Engine
from loopengine.app.resolution import Decider, Resolution
from loopengine.channels.slack import blocks, views
from loopengine.channels.slack import interact as slack
from loopengine.channels.slack import reply as slack_reply
from loopengine.channels.slack.interact import SlackAction, SlackRequest, SlackSubmission
from loopengine.channels.slack.send import DEFAULT_API_BASE
from loopengine.channels.slack.values import ANSWER, APPROVE, TEXT
from loopengine.domain.errors import ConfigError, DeliveryError, Forbidden, InvalidInput
from loopengine.domain.jsontypes import JsonDict
from loopengine.domain.limits import MAX_ANSWER_CHARS
from loopengine.domain.principals import typed
from loopengine.http import openapi, root, secrets, web
from loopengine.http.observability import logger

router = Router()  # type: ignore[no-untyped-call]

SECRET_ENV = "LOOPENGINE_SLACK_SIGNING_SECRET"
TEAM_ENV = "LOOPENGINE_SLACK_TEAM_ID"
"""Comma-separated Slack workspace (team) ids whose requests are accepted; unset refuses every one."""
BOT_TOKEN_ENV = "LOOPENGINE_SLACK_BOT_TOKEN"
"""The bot token (``xoxb-…``) ``views.open`` needs; unset: "Type an answer" says where else to answer."""
API_BASE_ENV = "LOOPENGINE_SLACK_API_BASE"
CHANNEL = "slack"

NOT_AN_APPROVER = "You are not among the approvers"
NO_ANSWER = "Type an answer"

REPLY_TIMEOUT = 2.0
"""Seconds per phase (connect, write, read) for the POST to ``response_url``; Slack waits 3 s."""
VIEWS_TIMEOUT = 2.0
"""Seconds per phase for ``views.open`` (the trigger is good for 3 s)."""


RESPONSES: dict[int, OpenAPIResponse] = {
    **openapi.SLACK,
    403: {
        "description": "LOOPENGINE_SLACK_TEAM_ID is not set, or the request is from another workspace",
        "content": {"application/json": {"model": m.ErrorBody}},
    },
}


def signing_secret() -> str | None:
    """The Slack signing secret (None when unset): the environment, or Secrets Manager in AWS.

    Read per request through :func:`loopengine.http.secrets.environ`, whose cache makes that cheap and
    lets a rotated secret take effect without a redeploy. Never logged.
    """
    return secrets.environ().get(SECRET_ENV) or None


def allowed_teams() -> frozenset[str]:
    """The workspace ids of ``LOOPENGINE_SLACK_TEAM_ID`` (empty: none, every request is refused)."""
    raw = secrets.environ().get(TEAM_ENV) or ""
    return frozenset(t.strip() for t in raw.split(",") if t.strip())


def decider(user_id: str, pending_id: str) -> Decider:
    """The Slack user ``user_id`` deciding the one item ``pending_id``: ``slack:<user id>``."""
    return Decider(typed("slack", user_id), CHANNEL, kind="slack", pending_id=pending_id)


@router.post("/integrations/slack/interactions", security=openapi.PUBLIC, responses=RESPONSES)
def interactions() -> Response[Any]:  # a JSON body (no model: Slack reads it)
    """Verify Slack's signature, read the click or submission, decide, tell Slack what happened."""
    event = router.current_event
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


def verified(body: bytes, headers: Mapping[str, str], now: float) -> SlackRequest:
    """The request, once it is Slack's, fresh, from an allowed workspace (steps 2-7 above)."""
    timestamp = headers.get("x-slack-request-timestamp")
    signature = headers.get("x-slack-signature")
    try:
        slack.check_freshness(timestamp, signature, now)
        teams = allowed_teams()
        if not teams:
            logger.warning("refused a Slack request: no workspace is configured")
            raise web.HttpError(403, "forbidden", f"Slack requests are refused here: {TEAM_ENV} is not set")
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
        verdict: slack.Decision = "approve" if action.decision == APPROVE else "deny"
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
        res = engine.answer(action.pending_id, answer, decider(action.user_id, action.pending_id))
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
    token = secrets.environ().get(BOT_TOKEN_ENV) or ""
    elsewhere = f"answer with POST /pending-questions/{action.pending_id}/answer"
    if not token or action.trigger_id is None:
        return blocks.ephemeral_message(f"Typing an answer in Slack is not set up here; {elsewhere}")
    view = blocks.answer_modal(action.pending_id, found[0], action.response_url)
    api_base = secrets.environ().get(API_BASE_ENV) or DEFAULT_API_BASE
    try:
        views.open_view(api_base, token, action.trigger_id, view, timeout=VIEWS_TIMEOUT)
    except (DeliveryError, ConfigError) as exc:  # its message never holds the token
        logger.warning("could not open the Slack answer modal", extra={"error": str(exc)})
        return blocks.ephemeral_message(f"The answer form could not be opened; try again, or {elsewhere}")
    return None


def submit(engine: Engine, sub: SlackSubmission) -> JsonDict:
    """Answer with the modal's text; the modal's reply (errors, or a notice of what happened)."""
    answer = sub.answer.replace("\r\n", "\n").strip()
    if not answer:
        return blocks.submission_errors(NO_ANSWER)
    if len(answer) > MAX_ANSWER_CHARS:
        return blocks.submission_errors(f"At most {MAX_ANSWER_CHARS} characters")
    try:
        res = engine.answer(sub.pending_id, answer, decider(sub.user_id, sub.pending_id))
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
        slack_reply.post_reply(response_url, message, timeout=REPLY_TIMEOUT)
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
