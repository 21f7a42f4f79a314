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

This module declares the route; the checks and decisions are :mod:`loopengine.channels.lark.interactions`,
imported by the first Lark request (or before a SnapStart snapshot), so the api's cold start and its
other routes never load Lark's code.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from loopengine.http import openapi

router = Router()  # type: ignore[no-untyped-call]

APP_ID_ENV = "LOOPENGINE_LARK_APP_ID"
TOKEN_ENV = "LOOPENGINE_LARK_VERIFICATION_TOKEN"
ENCRYPT_KEY_ENV = "LOOPENGINE_LARK_ENCRYPT_KEY"
CHANNEL = "lark"


RESPONSES = openapi.callback_answers(
    "the URL verification's {challenge}, or what Lark shows: a toast and the card "
    "that replaces the clicked one",
    (400, 413),
    **{
        "401": "the signature, timestamp, encryption or verification token check failed",
        "403": "LOOPENGINE_LARK_APP_ID is not set, or the callback is for another app",
        "503": "no Verification Token is configured, or the body is encrypted and no Encrypt Key is",
    },
)


@router.post(
    "/integrations/lark/interactions",
    summary="Lark card callback",
    security=openapi.PUBLIC,
    responses=RESPONSES,
)
def interactions() -> Response[Any]:  # a JSON body (no model: Lark reads it)
    """Verify the request as Lark signs it, answer a URL verification, or decide a click."""
    from loopengine.channels.lark import (
        interactions as lark_interactions,  # Lark's code: loaded by the first Lark request
    )

    return lark_interactions.interactions(router.current_event)
