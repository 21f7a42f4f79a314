"""The AWS notifier channels under moto: ``email`` (SES + magic links), ``sns`` and ``queue`` (SQS).

Every notifier is built the way an agent's ``notifier:`` block builds it
(:func:`loopengine.channels.base.build`) and sends real ``approval`` / ``question`` /
``run_finish`` notifications (payloads from :func:`loopengine.app.worker.batch.pending_notification` and the
loop's ``run_finish`` shape). What arrived is read back through the AWS APIs: the emails SES
accepted (as the notifier's client sent them), an SQS queue subscribed to the topic with raw
message delivery, the queue itself.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker
from loopengine.app.ports import Notification, Notifier
from loopengine.app.runtime import Runtime
from loopengine.app.worker.batch import pending_notification
from loopengine.authoring.tools import args_hash
from loopengine.channels import base as channels
from loopengine.channels.email.send import EmailNotifier
from loopengine.channels.magic import token as magic
from loopengine.channels.queue.send import QueueNotifier
from loopengine.channels.sns.send import SnsNotifier
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import ConfigError, DeliveryError
from loopengine.domain.checkpoint import PendingItem
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus
from loopengine.http import root
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.stores.sqlite import open_sqlite_stores
from tests.contract.conftest import FAKE_AWS, fake_session
from tests.harness import Calls, StaticAgents, agent
from tests.test_magic_links import get_page, post_page

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageTypeDef

REGION = "us-east-1"
SENDER = "loopengine@example.com"
ALICE = "alice@example.com"
BOB = "bob@example.com"
SECRET = "magic-link-secret-do-not-leak-0123456789"
PUBLIC_URL = "https://loop.example.test/prod"
LINK = re.compile(re.escape(PUBLIC_URL) + r"/magic/([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)")
HOURS = 3600.0
ACCOUNT = "123456789012"
"""The account moto answers as (any twelve digits name a queue or topic no request reaches)."""

REFUND_ARGS = {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken"}
REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number"},
        "reason": {"type": "string"},
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}


# -- fixtures and helpers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Email:
    """One email SES accepted, as the client sent it (``body``: the HTML part, else the text)."""

    source: str
    destinations: dict[str, list[str]]
    subject: str
    body: str


SENT: list[Email] = []
"""The emails SES accepted in the running test."""


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials and region, every AWS call answered by moto, and the emails SES accepted.

    ``boto3.client`` (what the notifiers call) uses boto3's default session: here the tests' one
    session (:func:`~tests.contract.conftest.fake_session`, whose clients cost little to make), on
    whose events botocore's ``before-parameter-build`` and ``after-call`` hooks keep each
    ``SendEmail`` that SES answered with a message id.
    """
    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    session = fake_session()
    session.events.register("before-parameter-build.ses.SendEmail", _keep_params, unique_id="test-ses-params")
    session.events.register("after-call.ses.SendEmail", _keep_accepted, unique_id="test-ses-accepted")
    SENT.clear()
    with mock_aws():
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", session)
        yield
    SENT.clear()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def env(**extra: str) -> dict[str, str]:
    """The environment a deployment gives the notifiers (``extra`` adds or overrides)."""
    base = {
        "LOOPENGINE_SES_SENDER": SENDER,
        "LOOPENGINE_MAGIC_LINK_SECRET": SECRET,
        "LOOPENGINE_PUBLIC_URL": PUBLIC_URL,
    }
    return {**base, **extra}


def build(channel: str, config: dict[str, Any], environ: dict[str, str], clock: FakeClock) -> Notifier:
    events = ["approval", "question", "run_start", "run_finish"]
    notifier = channels.build({"channel": channel, "config": config, "events": events}, environ, clock)
    assert notifier is not None
    return notifier


def turn_record() -> TurnRecord:
    return TurnRecord(
        turn_id="trn_0123456789abcdef0123456789abcdef",
        session_id="ses_0123456789abcdef0123456789abcdef",
        agent="customer-service",
        tenant="acme",
        config_hash="cfg",
        start_seq=0,
        created_at=1_800_000_000.0,
    )


def approval() -> Notification:
    """The approval notification the loop sends for a gated issue_refund."""
    item = PendingItem(
        pending_id="pnd_approval0000000000000000000001",
        tool_use_id="toolu_1",
        tool="issue_refund",
        args=REFUND_ARGS,
        reason="refunds need a human",
        kind="approval",
        args_hash=args_hash("issue_refund", REFUND_ARGS),
    )
    rt = cast(Runtime, SimpleNamespace(public_url=PUBLIC_URL))
    note = pending_notification(rt, turn_record(), item)
    event, payload = note.event, note.payload()
    assert event == "approval"
    return Notification(event, payload)


def question() -> Notification:
    """The question notification for a system_ask_user call."""
    args = {"question": "Refund or replacement?", "options": ["refund", "replacement"]}
    item = PendingItem(
        pending_id="pnd_question0000000000000000000001",
        tool_use_id="toolu_2",
        tool="system_ask_user",
        args=args,
        reason="the model asked",
        kind="question",
        args_hash=args_hash("system_ask_user", args),
    )
    rt = cast(Runtime, SimpleNamespace(public_url=PUBLIC_URL))
    note = pending_notification(rt, turn_record(), item)
    event, payload = note.event, note.payload()
    assert event == "question"
    return Notification(event, payload)


def run_finish() -> Notification:
    """The loop's run_finish shape."""
    t = turn_record()
    return Notification(
        "run_finish",
        {
            "turnId": t.turn_id,
            "sessionId": t.session_id,
            "agent": t.agent,
            "tenant": t.tenant,
            "stopReason": "end_turn",
            "text": "Refund issued; the customer has been emailed.",
            "trigger": "message",
        },
    )


def webhook_body(n: Notification) -> dict[str, Any]:
    """What the webhook channel posts for ``n`` (the SNS/SQS bodies must be the same document)."""
    return {"event": n.event, **n.payload}


def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    context["sent email"] = json.loads(json.dumps(params))


def _keep_accepted(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    if "MessageId" not in parsed:  # refused (an error response): nothing was sent
        return
    sent = context["sent email"]
    body = sent["Message"]["Body"]
    part = body.get("Html", body.get("Text"))
    SENT.append(Email(sent["Source"], sent["Destination"], sent["Message"]["Subject"]["Data"], part["Data"]))


def sent_emails() -> list[Email]:
    """Everything SES accepted so far in this test, in order."""
    return list(SENT)


def verified_ses() -> Any:
    ses = boto3.client("ses", region_name=REGION)
    ses.verify_email_identity(EmailAddress=SENDER)
    return ses


def capture_params(notifier: Notifier, service: str, operation: str) -> list[dict[str, Any]]:
    """Record the parameters of every ``operation`` call the notifier's client makes."""
    captured: list[dict[str, Any]] = []

    def keep(params: dict[str, Any], **_: Any) -> None:
        captured.append(json.loads(json.dumps(params)))

    client = cast(Any, notifier).client()
    client.meta.events.register(f"before-parameter-build.{service}.{operation}", keep)
    return captured


def subscribed_queue(topic_arn: str) -> str:
    """An SQS queue subscribed to ``topic_arn`` with raw message delivery; its URL."""
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="sns-tap")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns = boto3.client("sns", region_name=REGION)
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"})
    return url


def receive(url: str, expected: int) -> list[MessageTypeDef]:
    sqs = boto3.client("sqs", region_name=REGION)
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )
    messages = got.get("Messages", [])
    assert len(messages) == expected, messages
    return messages


def attrs(message: MessageTypeDef) -> dict[str, str]:
    return {k: v["StringValue"] for k, v in message.get("MessageAttributes", {}).items()}


# -- email ------------------------------------------------------------------------------------------


def test_approval_email_gives_each_recipient_its_own_working_magic_link(aws: None, clock: FakeClock) -> None:
    verified_ses()
    notifier = build("email", {"to": [ALICE, BOB]}, env(), clock)
    params = capture_params(notifier, "ses", "SendEmail")
    n = approval()

    assert notifier.send(n) == "email to 2 recipients via SES"

    mails = sent_emails()
    assert [m.destinations["ToAddresses"] for m in mails] == [[ALICE], [BOB]]
    assert {m.source for m in mails} == {SENDER}
    assert {m.subject for m in mails} == {"[loopengine] customer-service wants to issue_refund"}
    tokens = []
    for recipient, sent in zip((ALICE, BOB), params, strict=True):
        text = sent["Message"]["Body"]["Text"]["Data"]
        html = sent["Message"]["Body"]["Html"]["Data"]
        [token] = set(LINK.findall(text))
        assert set(LINK.findall(html)) == {token}
        claims = magic.verify_token(SECRET, token, clock.now())
        assert (claims.pending_id, claims.recipient) == (n.payload["pendingId"], recipient)
        assert claims.expires_at == clock.now() + 72 * HOURS  # the default link_ttl
        tokens.append(token)
        for body in (text, html):
            assert "issue_refund" in body and "refunds need a human" in body
            assert n.payload["argsHash"] in body
            assert "212.0" in body and "A-1001" in body
            assert "changes nothing" in body and "confirm page" in body
            assert SECRET not in body
        assert json.dumps(REFUND_ARGS, indent=2, sort_keys=True) in text  # pretty JSON
        assert f"for {recipient} only" in text
    assert tokens[0] != tokens[1]
    # the link's token is bound to its recipient: the other's token names the other
    assert magic.verify_token(SECRET, tokens[1], clock.now()).recipient == BOB


def test_email_html_escapes_model_content(aws: None, clock: FakeClock) -> None:
    verified_ses()
    notifier = build("email", {"to": [ALICE]}, env(), clock)
    evil = "<script>alert(1)</script>"
    n = approval()
    notifier.send(Notification(n.event, {**n.payload, "reason": evil, "args": {"note": evil}}))
    [mail] = sent_emails()
    assert "<script>" not in mail.body and "&lt;script&gt;" in mail.body


def test_question_email_shows_the_question_and_options(aws: None, clock: FakeClock) -> None:
    verified_ses()
    notifier = build("email", {"to": [ALICE], "link_ttl": "2h"}, env(), clock)
    params = capture_params(notifier, "ses", "SendEmail")
    n = question()
    assert notifier.send(n) == "email to 1 recipient via SES"
    [mail] = sent_emails()
    assert mail.subject == "[loopengine] customer-service asks: Refund or replacement?"
    text = params[0]["Message"]["Body"]["Text"]["Data"]
    for body in (text, mail.body):
        assert "Refund or replacement?" in body and "replacement" in body
        [token] = set(LINK.findall(body))
        claims = magic.verify_token(SECRET, token, clock.now())
        assert (claims.pending_id, claims.recipient) == (n.payload["pendingId"], ALICE)
        assert claims.expires_at == clock.now() + 2 * HOURS
    assert "- refund\n- replacement" in text


def test_run_finish_email_is_a_plain_summary(aws: None, clock: FakeClock) -> None:
    verified_ses()
    notifier = build("email", {"to_env": "OPS_EMAILS"}, env(OPS_EMAILS=f"{ALICE}, {BOB}"), clock)
    params = capture_params(notifier, "ses", "SendEmail")
    assert notifier.send(run_finish()) == "email to 2 recipients via SES"
    mails = sent_emails()
    assert [m.destinations["ToAddresses"] for m in mails] == [[ALICE], [BOB]]
    assert mails[0].subject == "[loopengine] customer-service finished a run (end_turn)"
    text = params[0]["Message"]["Body"]["Text"]["Data"]
    assert "end_turn" in text and "Refund issued; the customer has been emailed." in text
    assert "/magic/" not in text and "/magic/" not in mails[0].body


def test_unverified_sender_is_a_delivery_error_without_secrets(aws: None, clock: FakeClock) -> None:
    notifier = build("email", {"to": [ALICE, BOB]}, env(), clock)  # SENDER never verified
    with pytest.raises(DeliveryError) as caught:
        notifier.send(approval())
    message = str(caught.value)
    assert "sent to 0 of 2 recipients" in message and "MessageRejected" in message
    assert SECRET not in message and "/magic/" not in message
    assert isinstance(caught.value.__cause__, ClientError)
    assert sent_emails() == []


def test_email_config_can_name_its_own_sender_and_public_url(aws: None, clock: FakeClock) -> None:
    ses = boto3.client("ses", region_name=REGION)
    ses.verify_email_identity(EmailAddress="ops-bot@example.com")
    config = {"to": ALICE, "from": "Ops Bot <ops-bot@example.com>", "public_url_env": "OTHER_URL"}
    notifier = build("email", config, env(OTHER_URL="https://other.example.test/"), clock)
    notifier.send(approval())
    [mail] = sent_emails()
    assert mail.source == "Ops Bot <ops-bot@example.com>"
    assert "https://other.example.test/magic/" in mail.body


# -- sns --------------------------------------------------------------------------------------------


def test_sns_publishes_the_webhook_body_with_subject_and_attributes(aws: None, clock: FakeClock) -> None:
    topic = boto3.client("sns", region_name=REGION).create_topic(Name="loopengine-notify")["TopicArn"]
    tap = subscribed_queue(topic)
    notifier = build("sns", {}, env(LOOPENGINE_SNS_TOPIC_ARN=topic), clock)
    params = capture_params(notifier, "sns", "Publish")

    for n in (approval(), question(), run_finish()):
        assert notifier.send(n) == "sns loopengine-notify"

    received = receive(tap, 3)
    assert [json.loads(m["Body"]) for m in received] == [
        webhook_body(n) for n in (approval(), question(), run_finish())
    ]
    assert [attrs(m) for m in received] == [
        {"event": e, "agent": "customer-service"} for e in ("approval", "question", "run_finish")
    ]
    assert [p["Subject"] for p in params] == [
        "[loopengine] customer-service wants to issue_refund",
        "[loopengine] customer-service asks: Refund or replacement?",
        "[loopengine] customer-service finished a run (end_turn)",
    ]
    # compact, event first: byte for byte the webhook channel's body
    assert params[0]["Message"] == json.dumps(webhook_body(approval()), separators=(",", ":"))


def test_sns_subject_is_short_printable_ascii(aws: None, clock: FakeClock) -> None:
    topic = boto3.client("sns", region_name=REGION).create_topic(Name="t")["TopicArn"]
    notifier = build("sns", {"topic_arn": topic}, env(), clock)
    params = capture_params(notifier, "sns", "Publish")
    n = question()
    long_question = "Wöuld you like\na refund " + "x" * 200
    notifier.send(Notification(n.event, {**n.payload, "question": long_question}))
    subject = params[0]["Subject"]
    assert len(subject) <= 100 and subject.endswith("...")
    assert subject.isascii() and subject.isprintable() and "\n" not in subject
    assert json.loads(params[0]["Message"])["question"] == long_question  # the body keeps it all


def test_sns_fifo_topic_groups_by_turn(aws: None, clock: FakeClock) -> None:
    sns = boto3.client("sns", region_name=REGION)
    topic = sns.create_topic(Name="notify.fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    notifier = build("sns", {"topic_arn": topic}, env(), clock)
    params = capture_params(notifier, "sns", "Publish")
    n = approval()
    assert notifier.send(n) == "sns notify.fifo"
    assert params[0]["MessageGroupId"] == n.payload["turnId"]
    assert params[0]["MessageDeduplicationId"] == hashlib.sha256(params[0]["Message"].encode()).hexdigest()


def test_sns_missing_topic_is_a_delivery_error(aws: None, clock: FakeClock) -> None:
    arn = f"arn:aws:sns:{REGION}:{ACCOUNT}:nobody-made-this"
    notifier = build("sns", {"topic_arn": arn}, env(), clock)
    with pytest.raises(DeliveryError, match=r"sns nobody-made-this: publish failed: NotFound") as caught:
        notifier.send(approval())
    assert isinstance(caught.value.__cause__, ClientError)


# -- queue (SQS) ------------------------------------------------------------------------------------


def test_queue_sends_the_webhook_body_with_attributes(aws: None, clock: FakeClock) -> None:
    url = boto3.client("sqs", region_name=REGION).create_queue(QueueName="loopengine-notify")["QueueUrl"]
    notifier = build("queue", {"queue_url_env": "MY_QUEUE"}, env(MY_QUEUE=url), clock)
    assert notifier.send(approval()) == "queue loopengine-notify"
    assert notifier.send(run_finish()) == "queue loopengine-notify"
    first, second = receive(url, 2)
    assert json.loads(first["Body"]) == webhook_body(approval())
    assert first["Body"] == json.dumps(webhook_body(approval()), separators=(",", ":"))
    assert attrs(first) == {"event": "approval", "agent": "customer-service"}
    assert json.loads(second["Body"]) == webhook_body(run_finish())
    assert attrs(second)["event"] == "run_finish"


def test_queue_defaults_to_the_deployment_queue(aws: None, clock: FakeClock) -> None:
    url = boto3.client("sqs", region_name=REGION).create_queue(QueueName="deployment-queue")["QueueUrl"]
    notifier = build("queue", {}, env(LOOPENGINE_SQS_QUEUE_URL=url), clock)
    assert notifier.send(question()) == "queue deployment-queue"
    [message] = receive(url, 1)
    assert json.loads(message["Body"])["question"] == "Refund or replacement?"


def test_fifo_queue_groups_by_turn_and_deduplicates_by_body(aws: None, clock: FakeClock) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="notify.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    notifier = build("queue", {"queue_url": url}, env(), clock)
    n = approval()
    assert notifier.send(n) == "queue notify.fifo"
    assert notifier.send(n) == "queue notify.fifo"  # the same notification again: deduplicated
    [message] = receive(url, 1)
    body = json.dumps(webhook_body(n), separators=(",", ":"))
    assert message["Body"] == body
    assert message["Attributes"]["MessageGroupId"] == n.payload["turnId"]
    assert message["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(body.encode()).hexdigest()
    assert attrs(message)["event"] == "approval"


def test_missing_queue_is_a_delivery_error(aws: None, clock: FakeClock) -> None:
    url = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/nobody-made-this"
    notifier = build("queue", {"queue_url": url}, env(), clock)
    with pytest.raises(DeliveryError, match=r"queue nobody-made-this: send failed") as caught:
        notifier.send(approval())
    assert isinstance(caught.value.__cause__, ClientError)


# -- what every channel shares ----------------------------------------------------------------------


def test_clients_use_standard_retries_and_are_created_only_on_first_use(aws: None, clock: FakeClock) -> None:
    notifiers: list[Any] = [
        build("email", {"to": [ALICE]}, env(), clock),
        build("sns", {}, env(LOOPENGINE_SNS_TOPIC_ARN=f"arn:aws:sns:{REGION}:{ACCOUNT}:t"), clock),
        build("queue", {"queue_url": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/q"}, env(), clock),
    ]
    assert [type(n) for n in notifiers] == [EmailNotifier, SnsNotifier, QueueNotifier]
    for notifier in notifiers:
        assert notifier._client is None  # building one creates no client
        client = notifier.client()
        assert client is notifier.client()  # one per notifier
        # Config(retries={"mode": "standard", "max_attempts": 5}): botocore stores it as 1 + 5 tries
        assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 6}
        assert client.meta.region_name == REGION


def test_importing_and_building_the_channels_does_not_import_boto3() -> None:
    script = f"""
import sys
from loopengine.domain.base.clock import FakeClock
from loopengine.channels import base as channels
env = {{"LOOPENGINE_SES_SENDER": "{SENDER}", "LOOPENGINE_MAGIC_LINK_SECRET": "s",
       "LOOPENGINE_PUBLIC_URL": "{PUBLIC_URL}",
       "LOOPENGINE_SNS_TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:t",
       "LOOPENGINE_SQS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/q"}}
blocks = [{{"channel": "email", "config": {{"to": ["{ALICE}"]}}}}, {{"channel": "sns"}}]
for block in [*blocks, {{"channel": "queue"}}]:
    assert channels.build(block, env, FakeClock()) is not None
assert "boto3" not in sys.modules and "botocore" not in sys.modules, sorted(sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_an_unknown_event_or_unserialisable_payload_is_a_delivery_error(aws: None, clock: FakeClock) -> None:
    verified_ses()
    topic = boto3.client("sns", region_name=REGION).create_topic(Name="t")["TopicArn"]
    url = boto3.client("sqs", region_name=REGION).create_queue(QueueName="q")["QueueUrl"]
    for notifier in (
        build("email", {"to": [ALICE]}, env(), clock),
        build("sns", {"topic_arn": topic}, env(), clock),
        build("queue", {"queue_url": url}, env(), clock),
    ):
        with pytest.raises(DeliveryError, match="unknown notification event"):
            notifier.send(Notification("nope", {}))
    for notifier in (
        build("sns", {"topic_arn": topic}, env(), clock),
        build("queue", {"queue_url": url}, env(), clock),
    ):
        with pytest.raises(DeliveryError, match="not JSON-serialisable"):
            notifier.send(Notification("run_finish", {"text": float("nan")}))


@pytest.mark.parametrize(
    ("channel", "config", "environ", "message"),
    [
        ("email", {}, env(), "needs to"),
        ("email", {"to_env": "UNSET"}, env(), "needs to"),
        ("email", {"to": ["not-an-address"]}, env(), "not an email address"),
        ("email", {"to": [ALICE, "x@y.z\r\nBcc: evil@example.com"]}, env(), "not an email address"),
        ("email", {"to": 5}, env(), "list of email addresses"),
        (
            "email",
            {"to": [ALICE]},
            {**env(), "LOOPENGINE_SES_SENDER": ""},
            "LOOPENGINE_SES_SENDER is not set",
        ),
        ("email", {"to": [ALICE], "from_env": "MY_SENDER"}, env(), "MY_SENDER is not set"),
        (
            "email",
            {"to": [ALICE]},
            {**env(), "LOOPENGINE_MAGIC_LINK_SECRET": ""},
            "LOOPENGINE_MAGIC_LINK_SECRET",
        ),
        (
            "email",
            {"to": [ALICE]},
            {**env(), "LOOPENGINE_PUBLIC_URL": ""},
            "LOOPENGINE_PUBLIC_URL is not set",
        ),
        ("email", {"to": [ALICE], "public_url": "loop.example"}, env(), "absolute http"),
        ("email", {"to": [ALICE], "link_ttl": "soon"}, env(), "link_ttl: 'soon' is not a duration"),
        ("email", {"to": [ALICE], "too": [BOB]}, env(), "unknown config key 'too'"),
        ("sns", {}, env(), "needs topic_arn .*LOOPENGINE_SNS_TOPIC_ARN is not set"),
        ("sns", {"topic_arn_env": "MY_TOPIC"}, env(), "MY_TOPIC is not set"),
        ("sns", {"topic_arn": "my-topic"}, env(), "not an SNS topic ARN"),
        ("queue", {}, env(), "needs queue_url .*LOOPENGINE_SQS_QUEUE_URL is not set"),
        ("queue", {"queue_url": "my-queue"}, env(), "not an SQS queue URL"),
        ("queue", {"queue_url": "https://sqs.us-east-1.amazonaws.com/1/a b"}, env(), "not an SQS queue name"),
    ],
)
def test_missing_or_bad_config_is_a_clear_config_error(
    channel: str, config: dict[str, Any], environ: dict[str, str], message: str, clock: FakeClock
) -> None:
    with pytest.raises(ConfigError, match=message):
        channels.build({"channel": channel, "config": config}, environ, clock)


@pytest.mark.parametrize(
    ("channel", "config"),
    [
        ("email", {"to": [ALICE], "magic_link_secret": SECRET}),
        ("email", {"to": [ALICE], "aws_secret_access_key": SECRET}),
        ("sns", {"topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "aws_secret_access_key": SECRET}),
        ("sns", {"topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "aws_session_token": SECRET}),
        ("queue", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "secret": SECRET}),
    ],
)
def test_inline_secrets_are_refused(channel: str, config: dict[str, Any], clock: FakeClock) -> None:
    with pytest.raises(ConfigError, match="never inline") as caught:
        channels.build({"channel": channel, "config": config}, env(), clock)
    assert SECRET not in str(caught.value)


def test_the_magic_link_secret_cannot_be_redirected(clock: FakeClock) -> None:
    # the /magic pages verify with LOOPENGINE_MAGIC_LINK_SECRET only
    with pytest.raises(ConfigError, match="always signed with LOOPENGINE_MAGIC_LINK_SECRET"):
        channels.build(
            {"channel": "email", "config": {"to": [ALICE], "magic_link_secret_env": "OTHER"}},
            env(OTHER="x"),
            clock,
        )


def test_notifier_reprs_show_no_secret(clock: FakeClock) -> None:
    notifier = build("email", {"to": [ALICE]}, env(), clock)
    assert SECRET not in repr(notifier) and ALICE in repr(notifier)


# -- end to end: an engine pauses, the email arrives, its link opens the confirm page ---------------


@pytest.fixture
def deployed(
    aws: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Engine, Calls, FakeClock]]:
    """An Engine whose customer-service agent notifies by email (SES under moto), installed for the api."""
    monkeypatch.setenv("LOOPENGINE_MAGIC_LINK_SECRET", SECRET)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "loopengine-test")
    clock = FakeClock()
    calls = Calls()
    notifier_block = {
        "channel": "email",
        "config": {"to": [ALICE, BOB]},
        "events": ["approval", "run_finish"],
    }
    config = agent(
        "customer-service",
        [calls.tool("issue_refund", REFUND_SCHEMA)],
        {"rules": [{"tool": "issue_refund", "decision": "ask", "reason": "refunds need a human"}]},
        notifier=notifier_block,
    )
    model = ScriptedModel.from_list([call(use("issue_refund", REFUND_ARGS)), say("Refund issued.")])
    stores = open_sqlite_stores(str(tmp_path / "e2e.db"), clock)
    invoker = InlineInvoker()
    rt = Runtime(
        stores=stores,
        agents=StaticAgents(config),
        model_for=lambda _c: model,
        notifier_for=lambda c: channels.build(c.notifier or {}, env(), clock),
        invoker=invoker,
        public_url=PUBLIC_URL,
    )
    engine = Engine(rt)
    invoker.resume = engine.resume
    root.install(engine)
    try:
        yield engine, calls, clock
    finally:
        root.install(None)
        stores.close()


def audit(engine: Engine, turn_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in engine.rt.stores.turns.events(turn_id) if e["type"] == kind]


def test_a_paused_approval_is_emailed_and_its_magic_link_decides_it(
    deployed: tuple[Engine, Calls, FakeClock],
) -> None:
    engine, calls, clock = deployed
    verified_ses()
    out = engine.send_message("customer-service", "order A-1001 arrived broken")
    assert out.status is TurnStatus.PAUSED and out.stop_reason is StopReason.PENDING_APPROVAL
    [item] = out.pending

    [notified] = audit(engine, out.turn_id, "notified")
    assert notified["notification"] == "approval"
    assert notified["channel"] == "email to 2 recipients via SES"
    mails = sent_emails()
    assert [m.destinations["ToAddresses"] for m in mails] == [[ALICE], [BOB]]
    links = {m.destinations["ToAddresses"][0]: LINK.search(m.body) for m in mails}
    tokens = {r: match.group(1) for r, match in links.items() if match}
    assert set(tokens) == {ALICE, BOB} and tokens[ALICE] != tokens[BOB]
    for recipient, token in tokens.items():
        claims = magic.verify_token(SECRET, token, clock.now())
        assert (claims.pending_id, claims.recipient) == (item.pending_id, recipient)

    # Bob opens his link: the confirm page shows the call and changes nothing
    clock.advance(2 * HOURS)
    page = get_page(tokens[BOB])
    assert page.status == 200 and page.state == "form", page.html
    assert "issue_refund" in page.html and "customer-service" in page.html and BOB in page.html
    assert calls.log == []

    # he approves there: the refund runs once, the turn finishes, the run_finish email follows
    done = post_page(tokens[BOB], page.submit("approve"))
    assert done.state == "approved", done.html
    assert calls.log == [("issue_refund", REFUND_ARGS)]
    [decided] = audit(engine, out.turn_id, "decided")
    assert decided["decidedBy"] == f"email:{BOB}" and decided["channel"] == "magic-link"
    turn = engine.turn(out.turn_id)
    assert turn.status is TurnStatus.FINISHED and turn.text == "Refund issued."
    finished = sent_emails()[2:]
    assert [m.subject for m in finished] == ["[loopengine] customer-service finished a run (end_turn)"] * 2
    assert all("Refund issued." in m.body for m in finished)
    # Alice's link now only reports what happened
    assert get_page(tokens[ALICE]).state == "already-resolved"


def test_a_failed_email_during_a_pause_never_loses_the_pending_item(
    deployed: tuple[Engine, Calls, FakeClock],
) -> None:
    engine, calls, _clock = deployed  # the sender identity is NOT verified: SES rejects
    out = engine.send_message("customer-service", "order A-1001 arrived broken")
    assert out.status is TurnStatus.PAUSED
    [item] = out.pending

    [failed] = audit(engine, out.turn_id, "notification_failed")
    assert failed["notification"] == "approval"
    assert "sent to 0 of 2 recipients" in failed["error"] and "MessageRejected" in failed["error"]
    assert SECRET not in json.dumps(engine.rt.stores.turns.events(out.turn_id))
    assert audit(engine, out.turn_id, "notified") == []
    assert sent_emails() == []

    cp = engine.rt.stores.checkpoints.find_by_pending(item.pending_id)
    assert cp is not None and not cp.closed and item.pending_id in cp.outstanding
    assert engine.turn(out.turn_id).status is TurnStatus.PAUSED
    assert calls.log == []
