"""Email a person when a call waits for them: an SNS topic with an email subscription per
address, fed by two rules on the run-events bus that match `ApprovalRequested`, one per `kind`:
a call to approve, and a human-input tool's question to answer.

- **The message** is written by each rule's input transformer from the event's detail: the tool,
  the run, the approval and its link (`callback_url`), and when it expires. Never the
  arguments, nor the question: an email crosses mail systems we do not control, and a question
  may quote what the run read (a customer's data); the page behind the link shows them to
  whoever holds it. The link is signed and expiring, the first decision wins, and it never
  carries the task token (README "The approval link"). The message says so, and whether the link
  may edit the arguments (`link_edits`), since anyone the mail reaches holds it.
- **Encryption**: SNS encrypts the topic with a customer-managed KMS key of its own (rotated
  yearly). Not the AWS-managed `alias/aws/sns`: its key policy cannot be changed, so EventBridge
  could not encrypt what it publishes and every message would be dropped
  (https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services).
  The key's policy lets EventBridge use it for this account's topics only.
- **Who may publish**: the topic's policy lets EventBridge publish for this one rule
  (`aws:SourceArn`), refuses any request not made over TLS, and grants nothing else.

Each address gets a confirmation email from AWS first; nothing is sent to it until it confirms.
"""

import re
from collections.abc import Sequence

import jsii
from aws_cdk import Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from toolpipe.shared.runs.events import SOURCE, ApprovalRequested

# One address, as SNS's email protocol takes it: no display name, no list. SNS and the
# confirmation email are the real check; this catches typos and separators at synth time.
ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")
# What the context key and the construct option are called, for the error lines.
OPTION = "approval_emails"


def parse_addresses(value: str | Sequence[str] | None) -> list[str]:
    """The addresses of `-c approval_emails=a@example.com,b@example.com` (a string) or of
    cdk.json and `ToolPipeline(approval_emails=[...])` (a list), in order, each once; a value
    that is not an email address is a one-line `ValueError` naming it."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    addresses: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{OPTION}: {item!r} is not an email address")
        address = item.strip()
        if not address and isinstance(value, str):
            continue  # `a@x.org,` or an empty `-c approval_emails=`: nothing to subscribe
        if not ADDRESS.fullmatch(address):
            raise ValueError(f"{OPTION}: {address!r} is not an email address")
        if address not in addresses:
            addresses.append(address)
    return addresses


def _field(name: str) -> str:
    """An input-transformer placeholder for a field of the event's detail."""
    return events.EventField.from_path(f"$.detail.{name}")


def question_message() -> events.RuleTargetInput:
    """The email for a human-input call (`kind` `human`): that a question waits, and the link;
    not the question itself (see the module's docstring)."""
    tool, run_id, approval_id, expires_at = (
        _field(name) for name in ("tool", "run_id", "approval_id", "expires_at")
    )
    return events.RuleTargetInput.from_text(
        f"A question from the agent waits for your answer (tool {tool}, run {run_id}, "
        f"question {approval_id}).\n\n"
        f"Open this link to read it and answer: {_field('callback_url')}\n\n"
        f"Anyone holding this link can answer until it expires at {expires_at} (UTC); the first answer "
        "wins, and later ones change nothing. If nobody answers by then, the agent is told that no "
        "answer came."
    )


def message(link_edits: bool = False) -> events.RuleTargetInput:
    """The email's text, filled in by EventBridge from the `ApprovalRequested` detail; what the
    link can do follows the stack's `link_edits`."""
    # Each name is a field of the detail (tests/infra hold them to docs/events/ApprovalRequested.json);
    # `callback_url` arrives with the approval page (issue 9, item 4).
    tool, run_id, approval_id, expires_at = (
        _field(name) for name in ("tool", "run_id", "approval_id", "expires_at")
    )
    return events.RuleTargetInput.from_text(
        f"A call to the tool {tool} waits for your approval (run {run_id}, approval {approval_id}).\n\n"
        f"Open this link to see its arguments and approve or deny it: {_field('callback_url')}\n\n"
        f"Anyone holding this link can decide until it expires at {expires_at} (UTC); the first "
        "decision wins, here or through the API, and later ones change nothing. "
        + (
            "The link can also approve with edited arguments. "
            if link_edits
            else "The link approves or denies the arguments as they are; to change them, an "
            f"authenticated approver runs: toolpipe approve {approval_id} --arguments '...'. "
        )
        + "If nobody decides by then, the call counts as denied and is not run."
    )


class ApprovalEmails(Construct):
    """The topic (`topic`), one email subscription per address, and the rule that publishes
    each `ApprovalRequested` event of `bus` to the topic as a readable message."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bus: events.IEventBus,
        addresses: Sequence[str],
        link_edits: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        addresses = parse_addresses(addresses)
        if not addresses:
            raise ValueError(f"{OPTION}: give at least one email address")
        self.key = kms.Key(
            self,
            "Key",
            description="toolpipe: encrypts the approval emails' SNS topic",
            enable_key_rotation=True,
        )
        # EventBridge encrypts what it publishes to the topic with this key, through SNS, which
        # names the topic in the encryption context of every KMS call. The topic's own ARN cannot
        # be named here (the key -> topic -> key chain would loop): this account's and region's
        # topics only. The topic's policy below is the guard on who may publish at all.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:sns:topicArn": Stack.of(self).format_arn(
                            service="sns", resource="*"
                        )
                    }
                },
            )
        )
        self.topic = sns.Topic(
            self, "Topic", display_name="toolpipe approvals", master_key=self.key, enforce_ssl=True
        )
        for address in addresses:
            self.topic.add_subscription(subscriptions.EmailSubscription(address))
        # One rule per kind, each with its own wording (an input transformer has no conditionals).
        # `kind` is in every ApprovalRequested; a client-executed call publishes another event.
        self.rule = self._rule(
            "Requested", "a tool call waits for a person's approval", "approval", bus, message(link_edits)
        )
        self.question_rule = self._rule(
            "QuestionAsked",
            "a human-input tool's question waits for an answer",
            "human",
            bus,
            question_message(),
        )
        # `targets.SnsTopic` would grant EventBridge `sns:Publish` from any rule of any account;
        # this grant is narrowed to these two rules (`aws:SourceArn`), the confused-deputy guard.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "ArnEquals": {"aws:SourceArn": [self.rule.rule_arn, self.question_rule.rule_arn]}
                },
            )
        )

    def _rule(
        self, construct_id: str, what: str, kind: str, bus: events.IEventBus, text: events.RuleTargetInput
    ) -> events.Rule:
        rule = events.Rule(
            self,
            construct_id,
            description=f"Emails the approvers when {what} (ApprovalRequested, kind {kind})",
            event_bus=bus,
            event_pattern=events.EventPattern(
                source=[SOURCE], detail_type=[ApprovalRequested.__name__], detail={"kind": [kind]}
            ),
        )
        rule.add_target(_Publish(self.topic, text))
        return rule


@jsii.implements(events.IRuleTarget)
class _Publish:
    """The topic as the rule's target, with the message; unlike `targets.SnsTopic`, it grants
    nothing itself: the topic's policy (above) allows this rule only."""

    def __init__(self, topic: sns.ITopic, message: events.RuleTargetInput) -> None:
        self.topic, self.message = topic, message

    # `rule` unused, and typed wide: aws-cdk-lib's type for it changed (IRule, then IRuleRef).
    def bind(self, rule: object, id: str | None = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(
            arn=self.topic.topic_arn, input=self.message, target_resource=self.topic
        )
