"""The ``email`` channel: SES email, with a magic link of its own for every recipient.

    notifier:
      channel: email
      config:
        to: [ops@example.com, lead@example.com]   # or to_env: a variable holding "a@x,b@y"
        from_env: LOOPENGINE_SES_SENDER            # the default; or from: loopengine@example.com
        link_ttl: 72h                              # how long each magic link works (default 72h)
      events: [approval, question]

An ``approval`` or ``question`` sends one email per recipient, each with its own signed, expiring
magic link (:mod:`..magic.token`): ``{LOOPENGINE_PUBLIC_URL}/magic/{token}``, where the token
names the pendingId and that recipient, who is then recorded as ``decidedBy``. Opening the link
changes nothing; it shows a confirm page. The email shows the tool, its arguments, the reason and
the argsHash (or the question and its options). ``run_start`` / ``run_finish`` send a plain
summary. Tokens are signed with ``LOOPENGINE_MAGIC_LINK_SECRET`` (the variable the ``/magic``
pages verify with; never inline, never logged): without it the notifier is not built.

Sent with SES ``SendEmail`` (v1 API); the boto3 client is created on first send, with the standard
retry mode. A recipient SES refuses does not stop the others; the send then raises
:class:`~loopengine.domain.base.errors.DeliveryError` saying how many got theirs.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from loopengine.app.ports import Notification
from loopengine.channels.aws import (
    EVENTS,
    AwsNotifier,
    aws_errors,
    check_keys,
    describe_error,
    required_setting,
    subject_line,
)
from loopengine.channels.base import setting
from loopengine.channels.magic import token as magic
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import ConfigError, DeliveryError
from loopengine.domain.policy import describe, parse_duration

ENV_SENDER = "LOOPENGINE_SES_SENDER"
ENV_PUBLIC_URL = "LOOPENGINE_PUBLIC_URL"
DEFAULT_LINK_TTL = "72h"
MAX_RECIPIENTS = 50
MAX_SUBJECT_CHARS = 150
MAX_ARGS_CHARS = 20_000
KNOWN_KEYS = {
    "to",
    "to_env",
    "from",
    "from_env",
    "link_ttl",
    "public_url",
    "public_url_env",
    "region",
    "configuration_set",
}
_ADDRESS = re.compile(r"^[^@\s<>,;:\"()\[\]\\]+@[^@\s<>,;:\"()\[\]\\]+\.[^@\s<>,;:\"()\[\]\\.]+$")
_NAMED_ADDRESS = re.compile(r"^[^<>\r\n]*<([^<>\s]+)>$")


def _plural(n: int) -> str:
    return f"{n} recipient" if n == 1 else f"{n} recipients"


def _pretty(value: Any) -> str:
    """Indented JSON for people (truncated past MAX_ARGS_CHARS; the confirm page shows it all)."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > MAX_ARGS_CHARS:
        text = text[:MAX_ARGS_CHARS] + "\n... (truncated: the confirm page shows everything)"
    return text


def _when(expires_at: float) -> str:
    return datetime.fromtimestamp(int(expires_at), tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


class _Email:
    """One message: subject, plain text and HTML built side by side from the same rows."""

    def __init__(self, subject: str) -> None:
        text = " ".join(subject.split())
        if len(text) > MAX_SUBJECT_CHARS:
            text = text[: MAX_SUBJECT_CHARS - 3].rstrip() + "..."
        self.subject = text
        self._text: list[str] = []
        self._html: list[str] = []

    def para(self, text: str, *, muted: bool = False) -> None:
        self._text += [text, ""]
        style = ' style="color:#555;font-size:90%"' if muted else ""
        self._html.append(f"<p{style}>{html.escape(text)}</p>")

    def rows(self, rows: list[tuple[str, Any]]) -> None:
        shown = [(k, str(v)) for k, v in rows if v not in (None, "")]
        if not shown:
            return
        width = max(len(k) for k, _ in shown) + 2
        self._text += [f"{k + ':':<{width}}{v}" for k, v in shown] + [""]
        cells = "".join(
            f'<tr><th align="left" style="padding:2px 12px 2px 0">{html.escape(k)}</th>'
            f"<td><code>{html.escape(v)}</code></td></tr>"
            for k, v in shown
        )
        self._html.append(f"<table>{cells}</table>")

    def block(self, label: str, text: str) -> None:
        self._text += [f"{label}:", text, ""]
        self._html.append(
            f"<p>{html.escape(label)}:</p>"
            '<pre style="background:#f4f4f4;padding:8px;white-space:pre-wrap">'
            f"{html.escape(text)}</pre>"
        )

    def link(self, label: str, url: str) -> None:
        self._text += [f"{label}:", url, ""]
        href = html.escape(url, quote=True)
        self._html.append(
            f'<p><a href="{href}" style="display:inline-block;padding:10px 16px;background:#1a56db;'
            f'color:#fff;text-decoration:none;border-radius:4px">{html.escape(label)}</a></p>'
            f'<p style="color:#555;font-size:90%">Or open this address: {html.escape(url)}</p>'
        )

    def text(self) -> str:
        return "\n".join(self._text).rstrip() + "\n"

    def html(self) -> str:
        body = "\n".join(self._html)
        return (
            '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
            f'<body style="font-family:sans-serif;line-height:1.4">\n{body}\n</body></html>'
        )


class EmailNotifier(AwsNotifier):
    """Emails notifications through SES, one message (and one magic link) per recipient."""

    service = "ses"

    def __init__(
        self,
        recipients: list[str],
        sender: str,
        *,
        secret: str,
        public_url: str,
        clock: Clock,
        link_ttl: float = 72 * 3600.0,
        region: str | None = None,
        configuration_set: str | None = None,
        client: Any = None,
    ) -> None:
        """Send from ``sender`` to each of ``recipients``; links are signed with ``secret``.

        ``client`` replaces the boto3 SES client (built on first send otherwise). Raises
        :class:`~loopengine.domain.base.errors.ConfigError` for no recipients, an empty secret, a public URL
        that is not absolute http(s) or a non-positive link TTL.
        """
        if not recipients:
            raise ConfigError("notifier email: needs at least one recipient")
        if not secret:
            raise ConfigError(f"notifier email: magic links need {magic.SECRET_ENV}")
        parts = urlsplit(public_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("notifier email: the public URL must be an absolute http:// or https:// URL")
        if link_ttl <= 0:
            raise ConfigError("notifier email: link_ttl must be positive")
        super().__init__(region=region, client=client)
        self.recipients = list(recipients)
        self.sender = sender
        self.public_url = public_url.rstrip("/")
        self.link_ttl = link_ttl
        self._secret = secret
        self._clock = clock
        self._configuration_set = configuration_set

    def __repr__(self) -> str:
        """Show sender and recipients, never the secret."""
        return f"EmailNotifier(from={self.sender!r}, to={self.recipients!r})"

    # -- composing ------------------------------------------------------------------------------

    def magic_link(self, pending_id: str, recipient: str, now: float) -> tuple[str, float]:
        """The recipient's own link to ``pending_id`` and when it expires."""
        expires_at = now + self.link_ttl
        token = magic.issue_token(self._secret, pending_id, recipient, expires_at)
        return magic.magic_url(self.public_url, token), expires_at

    def compose(self, notification: Notification, recipient: str, now: float) -> _Email:
        """The email ``recipient`` gets for ``notification``."""
        p = notification.payload
        mail = _Email(subject_line(notification))
        agent = p.get("agent") or "the agent"
        where = [("Agent", agent), ("Tenant", p.get("tenant")), ("Turn", p.get("turnId"))]
        if notification.event in ("approval", "question"):
            pending_id = p.get("pendingId")
            if not isinstance(pending_id, str) or not pending_id:
                raise DeliveryError(f"email: the {notification.event} notification has no pendingId")
            url, expires_at = self.magic_link(pending_id, recipient, now)
            validity = (
                f"This link is for {recipient} only and works until {_when(expires_at)} "
                f"({describe(self.link_ttl)}). Please do not forward it."
            )
            if notification.event == "approval":
                mail.para(f"{agent} wants to run {p.get('tool')} and is waiting for your approval.")
                mail.rows([("Tool", p.get("tool")), ("Reason", p.get("reason")), *where])
                mail.block("Arguments", _pretty(p.get("args")))
                mail.rows([("Args hash", p.get("argsHash"))])
                mail.link("Review and decide", url)
                mail.para(
                    "Opening the link changes nothing: it shows a confirm page with the call, where "
                    "you approve or deny it. Nothing happens until you choose there.",
                    muted=True,
                )
            else:
                mail.para(f"{agent} has a question for you and is waiting for your answer.")
                mail.block("Question", str(p.get("question") or ""))
                options = p.get("options")
                if isinstance(options, list) and options:
                    mail.block("Options", "\n".join(f"- {o}" for o in options))
                mail.rows([("Reason", p.get("reason")), *where, ("Args hash", p.get("argsHash"))])
                mail.link("Answer", url)
                mail.para(
                    "Opening the link changes nothing: it shows a confirm page where you give your "
                    "answer. Nothing is sent until you submit it there.",
                    muted=True,
                )
            mail.para(validity, muted=True)
        elif notification.event == "run_start":
            mail.para(f"{agent} started a run.")
            mail.rows([*where, ("Session", p.get("sessionId")), ("Trigger", p.get("trigger"))])
        else:
            mail.para(f"{agent} finished a run.")
            mail.rows([("Stop reason", p.get("stopReason")), *where, ("Session", p.get("sessionId"))])
            text = p.get("text")
            mail.block("Final text", text if isinstance(text, str) and text else "(none)")
        return mail

    # -- sending --------------------------------------------------------------------------------

    def _redact(self, message: str) -> str:
        return message.replace(self._secret, "[redacted]")

    def send(self, notification: Notification) -> str:
        """Email every recipient; return ``"email to N recipients via SES"``.

        Raises :class:`~loopengine.domain.base.errors.DeliveryError` for an unknown event, an approval or
        question without pendingId, or when SES refuses any recipient's email (after trying all).
        """
        if notification.event not in EVENTS:
            raise DeliveryError(f"email: unknown notification event {notification.event!r}")
        now = self._clock.now()
        mails = [(r, self.compose(notification, r, now)) for r in self.recipients]
        errors = aws_errors()
        failures: list[tuple[str, Exception]] = []
        for recipient, mail in mails:
            request: dict[str, Any] = {
                "Source": self.sender,
                "Destination": {"ToAddresses": [recipient]},
                "Message": {
                    "Subject": {"Data": mail.subject, "Charset": "UTF-8"},
                    "Body": {
                        "Text": {"Data": mail.text(), "Charset": "UTF-8"},
                        "Html": {"Data": mail.html(), "Charset": "UTF-8"},
                    },
                },
            }
            if self._configuration_set:
                request["ConfigurationSetName"] = self._configuration_set
            try:
                self.client().send_email(**request)
            except errors as exc:
                failures.append((recipient, exc))
        if failures:
            sent = len(mails) - len(failures)
            reasons = "; ".join(f"{r}: {describe_error(e)}" for r, e in failures)
            message = f"email via SES: sent to {sent} of {_plural(len(mails))}; failed for {reasons}"
            raise DeliveryError(self._redact(message)) from failures[0][1]
        return f"email to {_plural(len(mails))} via SES"


def _address(value: str, what: str) -> str:
    """A bare address (``a@x.y``), or ``Name <a@x.y>`` for the sender; ConfigError otherwise."""
    value = value.strip()
    named = _NAMED_ADDRESS.match(value) if what == "from" else None
    bare = named.group(1) if named else value
    if "\r" in value or "\n" in value or not _ADDRESS.match(bare):
        raise ConfigError(f"notifier email: {what} has {value!r}, which is not an email address")
    return value


def _recipients(config: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    raw: Any = config.get("to")
    if raw in (None, "", []):
        env_name = config.get("to_env")
        raw = env.get(env_name, "") if isinstance(env_name, str) and env_name else ""
    if isinstance(raw, str):
        items: list[Any] = [part for part in raw.split(",") if part.strip()]
    elif isinstance(raw, list):
        items = raw
    else:
        raise ConfigError("notifier email: to must be a list of email addresses")
    if not items:
        raise ConfigError(
            "notifier email: needs to (a list of addresses) or to_env naming a set variable "
            "holding comma-separated addresses"
        )
    found: dict[str, str] = {}
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"notifier email: to has {item!r}, which is not an email address")
        address = _address(item, "to")
        found.setdefault(address.lower(), address)
    if len(found) > MAX_RECIPIENTS:
        raise ConfigError(f"notifier email: at most {MAX_RECIPIENTS} recipients")
    return list(found.values())


def from_config(config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> EmailNotifier:
    """An EmailNotifier from an agent's ``notifier: {channel: email, config: ...}`` block.

    Keys: ``to`` | ``to_env``, ``from`` | ``from_env`` (default LOOPENGINE_SES_SENDER), ``link_ttl``,
    ``public_url`` | ``public_url_env`` (default LOOPENGINE_PUBLIC_URL), ``region``,
    ``configuration_set``. The magic-link secret is always ``LOOPENGINE_MAGIC_LINK_SECRET``: the
    ``/magic`` pages verify tokens with it, so a token signed with anything else could never open.
    """
    if "magic_link_secret_env" in config or "secret_env" in config:
        raise ConfigError(
            f"notifier email: magic links are always signed with {magic.SECRET_ENV} "
            "(the /magic pages verify with it); remove the *_env override"
        )
    check_keys(config, "email", KNOWN_KEYS)
    recipients = _recipients(config, env)
    sender = _address(required_setting(config, env, "email", "from", ENV_SENDER), "from")
    public_url = setting(config, env, "public_url", ENV_PUBLIC_URL)
    if not public_url:
        named = config.get("public_url_env") or ENV_PUBLIC_URL
        raise ConfigError(f"notifier email: magic links need a public URL ({named} is not set)")
    secret = env.get(magic.SECRET_ENV, "")
    if not secret:
        raise ConfigError(f"notifier email: magic links need {magic.SECRET_ENV} to be set")
    ttl = parse_duration(config.get("link_ttl", DEFAULT_LINK_TTL), "notifier email: link_ttl")
    optional: dict[str, str | None] = {}
    for key in ("region", "configuration_set"):
        value = config.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"notifier email: {key} must be a non-empty string")
        optional[key] = value.strip() if value else None
    return EmailNotifier(
        recipients,
        sender,
        secret=secret,
        public_url=public_url,
        clock=clock,
        link_ttl=ttl,
        region=optional["region"],
        configuration_set=optional["configuration_set"],
    )
