"""``POST /integrations/slack/interactions``: a Slack button click decides a pending approval.

The route is not behind the API's credentials; Slack's request signature is its authentication
(``LOOPENGINE_SLACK_SIGNING_SECRET``, the app's Signing Secret). The order of checks:

1. the raw body (base64-decoded when API Gateway encoded it), 413 when over the size limit;
2. the signature headers must be present, well formed and fresh (±300 s), else 401. These need
   no secret, so a request that cannot be a current Slack request is refused even where Slack is
   not configured;
3. no signing secret configured: 503 ``not_configured`` (the secret is read once per process and
   never logged);
4. the HMAC must match, else 401, and nothing is decided;
5. the payload must be one click on a loopengine button (``channels/slack/interact``), else 400 JSON;
6. with ``LOOPENGINE_SLACK_TEAM_ID`` set (comma-separated workspace ids), the click's ``team.id``
   must be one of them, else 403 and nothing is decided (one Slack app, and so one signing
   secret, can be installed in several workspaces);
7. the click resolves the item as ``Decider(<Slack user id>, "slack")``.

Answers to Slack: everything Slack should show is a 200, because Slack turns any other status into
an error for the clicker. A decision, a late click and the reason an item is no longer open
(superseded, cancelled, expired) replace the original message, so its buttons go away; a click by
someone who is not among the rule's approvers, or on an item these buttons cannot decide, gets
an ephemeral answer and the message stays for the right person. 400/401/413/503 are for requests
that are not clicks Slack should show at all.

For ``block_actions`` Slack does not read the 200's body: the message changes only when the same
reply is POSTed to the click's ``response_url`` (:mod:`loopengine.channels.slack.reply`), which is
done after deciding and before answering. The body still carries the reply (for tools and tests
that read it). A failed POST is logged without the URL (it is a credential) and changes nothing:
the decision stands and Slack still gets its 200. Slack wants the answer within 3 s, so the POST
has a short timeout (:data:`REPLY_TIMEOUT`).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from loopengine.app.engine import Engine
from loopengine.app.resolution import Decider, Resolution
from loopengine.channels.slack import interact as slack
from loopengine.channels.slack import reply as slack_reply
from loopengine.channels.slack.interact import SlackAction
from loopengine.domain.errors import DeliveryError, Forbidden, InvalidInput
from loopengine.http import openapi, root, secrets, web
from loopengine.http.observability import logger

router = Router()  # type: ignore[no-untyped-call]

SECRET_ENV = "LOOPENGINE_SLACK_SIGNING_SECRET"
CHANNEL = "slack"

NOT_AN_APPROVER = "You are not among the approvers"

REPLY_TIMEOUT = 2.0
"""Seconds per phase (connect, write, read) for the POST to ``response_url``; Slack waits 3 s."""

TEAM_ENV = "LOOPENGINE_SLACK_TEAM_ID"
"""Comma-separated Slack workspace (team) ids whose clicks are accepted; unset accepts any."""


def signing_secret() -> str | None:
    """The Slack signing secret (None when unset): the environment, or Secrets Manager in AWS.

    Read per request through :func:`loopengine.http.secrets.environ`, whose cache makes that cheap and
    lets a rotated secret take effect without a redeploy. Never logged.
    """
    return secrets.environ().get(SECRET_ENV) or None


def allowed_teams() -> frozenset[str]:
    """The workspace ids of ``LOOPENGINE_SLACK_TEAM_ID`` (empty: any workspace)."""
    raw = secrets.environ().get(TEAM_ENV) or ""
    return frozenset(t.strip() for t in raw.split(",") if t.strip())


@router.post("/integrations/slack/interactions", security=openapi.PUBLIC, responses=openapi.SLACK)
def interactions() -> Response[Any]:  # a JSON body (no model: Slack reads it)
    """Verify Slack's signature, read the click, resolve the item, tell Slack what happened."""
    event = router.current_event
    body = _raw_body(event.body, bool(event.is_base64_encoded))
    headers = event.headers or {}
    timestamp = headers.get("x-slack-request-timestamp")
    signature = headers.get("x-slack-signature")
    engine = root.engine()
    now = engine.now()
    try:
        slack.check_freshness(timestamp, signature, now)
        secret = signing_secret()
        if secret is None:
            raise web.HttpError(503, "not_configured", "Slack is not configured")
        slack.verify_slack(secret, body, timestamp, signature, now)
    except slack.SlackVerificationError as exc:
        logger.warning("refused a Slack request", extra={"reason": exc.reason.value})
        raise web.HttpError(401, "unauthorized", f"Slack signature check failed: {exc}") from None
    try:
        action = slack.parse_interaction(body)
    except InvalidInput as exc:
        raise web.HttpError(400, "invalid_input", str(exc)) from None
    teams = allowed_teams()
    if teams and action.team_id not in teams:
        # the same app (and signing secret) may be installed in several workspaces
        logger.warning("refused a Slack click from another workspace")
        raise web.HttpError(403, "forbidden", "this Slack workspace may not decide here")
    logger.set_correlation_id(action.pending_id)
    try:
        who = Decider(action.user_id, CHANNEL, kind="slack", pending_id=action.pending_id)
        res = engine.resolve(action.pending_id, action.decision, who)
    except Forbidden:
        message = slack.ephemeral_message(NOT_AN_APPROVER)
    except InvalidInput as exc:  # e.g. a question's pendingId: these buttons cannot answer it
        message = slack.ephemeral_message(f"This cannot be decided here: {exc}")
    else:
        message = slack.replace_message(outcome_text(engine, action, res))
    if action.response_url is not None:
        send_reply(action.response_url, message)
    return web.reply(200, message)


def send_reply(response_url: str, message: slack.JsonDict) -> None:
    """POST ``message`` to the click's ``response_url``; a failure is logged, never raised.

    By now the click has been decided (or refused), so nothing here may turn the 200 into an
    error: Slack would show the clicker a failure for a decision that stands.
    """
    try:
        slack_reply.post_reply(response_url, message, timeout=REPLY_TIMEOUT)
    except DeliveryError as exc:  # its message names the host only, never the URL's path
        logger.warning("could not update the Slack message", extra={"error": str(exc)})
    except Exception as exc:  # a bug must not undo the answer either; the URL stays out of the log
        logger.warning("could not update the Slack message", extra={"error": type(exc).__name__})


def outcome_text(engine: Engine, action: SlackAction, res: Resolution) -> str:
    """What the message should say after this click: the decision, or what became of the item."""
    if not res.already_resolved:
        verb = "Approved" if action.decision == slack.APPROVE else "Denied"
        return f"{verb} by <@{action.user_id}>"
    return slack.fate_text(engine.item(action.pending_id).fate)


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
