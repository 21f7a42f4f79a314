"""Every limit on what a caller may send, in one place; routes, forms and the engine import them from here.

Channel-side limits that are the channel's own facts (Slack's 3,000-character text block, SES's
subject length, SQS's 256 KiB message) stay in the channel's package.
"""

from __future__ import annotations

MAX_MESSAGE_CHARS = 100_000
"""A user message (``POST /agents/{agent}/messages``)."""
MAX_ANSWER_CHARS = MAX_MESSAGE_CHARS
"""An answer to a question, through any channel (API, magic link, Slack, Lark, inbox)."""
MAX_COMMENT_CHARS = 4_000
"""A reviewer's comment on a decision, through any channel."""
MAX_WAIT_SECONDS = 25.0
"""The longest long-poll (``?wait=S`` on resolve and turn events): under API Gateway's 30 s."""
MAX_BODY_BYTES = 256 * 1024
"""A request body; larger is 413 before it is parsed (``loopengine dev`` refuses it before reading)."""
MAX_FORM_FIELDS = 200
"""Fields in one form post (magic link, inbox)."""
MAX_JSON_DEPTH = 64
"""Nesting of a JSON body; deeper is 400 ``invalid_input``."""
