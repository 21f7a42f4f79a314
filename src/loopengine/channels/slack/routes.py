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
8. it decides as ``slack:<user id>`` via ``slack`` (:func:`~loopengine.channels.slack.interactions.decider`;
   the typed identity is built
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

This module declares the route; the checks and decisions above are
:mod:`loopengine.channels.slack.interactions`, imported by the first Slack request (or before a SnapStart
snapshot), so the api's cold start and its other routes never load Slack's code.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from loopengine.http import openapi

router = Router()  # type: ignore[no-untyped-call]

SECRET_ENV = "LOOPENGINE_SLACK_SIGNING_SECRET"
TEAM_ENV = "LOOPENGINE_SLACK_TEAM_ID"
"""Comma-separated Slack workspace (team) ids whose requests are accepted; unset refuses every one."""
BOT_TOKEN_ENV = "LOOPENGINE_SLACK_BOT_TOKEN"
"""The bot token (``xoxb-…``) ``views.open`` needs; unset: "Type an answer" says where else to answer."""
API_BASE_ENV = "LOOPENGINE_SLACK_API_BASE"
CHANNEL = "slack"

NO_ANSWER = "Type an answer"

REPLY_TIMEOUT = 2.0
"""Seconds per phase (connect, write, read) for the POST to ``response_url``; Slack waits 3 s."""
VIEWS_TIMEOUT = 2.0
"""Seconds per phase for ``views.open`` (the trigger is good for 3 s)."""


RESPONSES = openapi.callback_answers(
    "the message Slack shows in place of the buttons (or to the clicker alone)",
    (400, 503),
    **{
        "401": "X-Slack-Signature check failed",
        "403": "LOOPENGINE_SLACK_TEAM_ID is not set, or the request is from another workspace",
    },
)


@router.post("/integrations/slack/interactions", security=openapi.PUBLIC, responses=RESPONSES)
def interactions() -> Response[Any]:  # a JSON body (no model: Slack reads it)
    """Verify Slack's signature, read the click or submission, decide, tell Slack what happened."""
    from loopengine.channels.slack import (
        interactions as slack_interactions,  # Slack's code: loaded by the first Slack request
    )

    return slack_interactions.interactions(router.current_event)
