"""A client for a loopengine HTTP API, for Python callers (httpx): what ``loopengine-client.js`` is for pages.

::

    from loopengine.client import Client

    with Client("http://127.0.0.1:8787", auth="admin:secret") as client:
        turn = client.send_message("customer-service", "Order A-1001 arrived broken.", live=True)
        for event in client.follow(turn.turn_id):
            if event.type == "approval:pending":
                client.approve(event["pendingId"], args_hash=event["argsHash"])
            if event.type == "finished":
                print(event.get("text"))

The same operations as the JavaScript module served at ``GET /chat/static/loopengine-client.js``:
:meth:`Client.send_message` (``Prefer: respond-async`` and an ``Idempotency-Key``: the answer comes at
once with the turn's id, and a lost answer is asked again with the same key, never making a second
turn), :meth:`Client.follow` (the turn's events as Server-Sent Events where the server streams them,
``loopengine dev``, else long polls, resuming from the last event seen, until the turn finishes),
:meth:`Client.approve`, :meth:`Client.deny`, :meth:`Client.answer`, :meth:`Client.cancel`,
:meth:`Client.get_session`. An error answer is :class:`ApiError` (its status, code and message); no
answer at all is :class:`Unreachable`. ``loopengine chat`` is built on it (with ``channel="live"``).
"""

from loopengine.client.api import RETRIES, WAIT_SECONDS, Auth, Client
from loopengine.client.replies import (
    ApiError,
    Cancelled,
    Event,
    EventPage,
    PendingItem,
    Resolution,
    Session,
    TurnReply,
    Unreachable,
)

__all__ = [
    "RETRIES",
    "WAIT_SECONDS",
    "ApiError",
    "Auth",
    "Cancelled",
    "Client",
    "Event",
    "EventPage",
    "PendingItem",
    "Resolution",
    "Session",
    "TurnReply",
    "Unreachable",
]
