"""Approval emails on the synthesized template (`-c approval_emails=…`, issue 9 item 6): an
encrypted, TLS-only SNS topic, one email subscription per address, and a rule on the run-events
bus that publishes each `ApprovalRequested` as a readable message; cdk-nag clean."""

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_auth import _synth
from toolpipe.infra.cdk.constructs.approval_emails import parse_addresses

ROOT = Path(__file__).resolve().parents[2]
APPROVERS = "ana@example.com, bob+approvals@example.org,ana@example.com"
# A detail as the orchestrator publishes it, with the link the approval page adds.
DETAIL = {
    "run_id": "r-1",
    "approval_id": "3f2a9c",
    "tool": "send_email",
    "expires_at": "2026-11-23T21:00:00+00:00",
    "callback_url": "https://a1b2.execute-api.eu-west-1.amazonaws.com/v1/approvals/3f2a9c/page?sig=x",
    "arguments_preview": '{"to": "ana@example.com", "body": "secret plans"}',
}


@pytest.fixture(scope="module")
def emails_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield _synth({"approval_emails": APPROVERS}, tmp_path_factory.mktemp("cdk.out"))


def _one(template: Any, kind: str) -> tuple[str, dict[str, Any]]:
    [(logical_id, resource)] = template.find_resources(kind).items()
    return logical_id, resource["Properties"]


def _approval_rule(template: Any, kind: str = "approval") -> tuple[str, dict[str, Any]]:
    """The rule that matches ApprovalRequested of `kind` (the stack has others on the bus)."""
    [(logical_id, rule)] = [
        (name, r["Properties"])
        for name, r in template.find_resources("AWS::Events::Rule").items()
        if r["Properties"].get("EventPattern", {}).get("detail-type") == ["ApprovalRequested"]
        and r["Properties"]["EventPattern"].get("detail") == {"kind": [kind]}
    ]
    return logical_id, rule


def _render(transformer: dict[str, Any], detail: dict[str, Any]) -> str:
    """The text EventBridge sends for `detail`: each placeholder replaced by its path's value."""

    def value(match: re.Match[str]) -> str:
        path = transformer["InputPathsMap"][match.group(1)]
        assert path.startswith("$.detail."), path
        return json.dumps(str(detail[path.removeprefix("$.detail.")]))[1:-1]

    return str(json.loads(re.sub(r"<([^<>]+)>", value, transformer["InputTemplate"])))


def test_without_addresses_there_is_no_topic(template: Any) -> None:
    template.resource_count_is("AWS::SNS::Topic", 0)
    template.resource_count_is("AWS::SNS::Subscription", 0)
    assert "ApprovalTopicArn" not in template.to_json()["Outputs"]


@pytest.mark.slow
def test_each_address_is_subscribed_once_by_email(emails_template: Any) -> None:
    topic, _ = _one(emails_template, "AWS::SNS::Topic")
    subscriptions = sorted(
        (s["Properties"]["Protocol"], s["Properties"]["Endpoint"], s["Properties"]["TopicArn"]["Ref"])
        for s in emails_template.find_resources("AWS::SNS::Subscription").values()
    )
    assert subscriptions == [
        ("email", "ana@example.com", topic),
        ("email", "bob+approvals@example.org", topic),
    ]
    assert emails_template.to_json()["Outputs"]["ApprovalTopicArn"]["Value"] == {"Ref": topic}


@pytest.mark.slow
def test_the_topic_is_encrypted_with_a_rotated_key_that_eventbridge_may_use_for_this_accounts_topics(
    emails_template: Any,
) -> None:
    key, key_props = _one(emails_template, "AWS::KMS::Key")
    _, topic = _one(emails_template, "AWS::SNS::Topic")
    assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    assert key_props["EnableKeyRotation"] is True
    [eventbridge] = [
        s
        for s in key_props["KeyPolicy"]["Statement"]
        if s.get("Principal") == {"Service": "events.amazonaws.com"}
    ]
    assert eventbridge["Action"] == ["kms:Decrypt", "kms:GenerateDataKey*"]
    [(operator, condition)] = eventbridge["Condition"].items()
    assert operator == "ArnLike" and list(condition) == ["kms:EncryptionContext:aws:sns:topicArn"]
    topics = json.dumps(condition["kms:EncryptionContext:aws:sns:topicArn"])
    assert all(part in topics for part in ('":sns:"', '"AWS::Region"', '"AWS::AccountId"', '":*"')), topics


@pytest.mark.slow
def test_only_the_rule_may_publish_and_only_over_tls(emails_template: Any) -> None:
    topic, _ = _one(emails_template, "AWS::SNS::Topic")
    rule, _ = _approval_rule(emails_template)
    question_rule, _ = _approval_rule(emails_template, "human")
    _, policy = _one(emails_template, "AWS::SNS::TopicPolicy")
    assert policy["Topics"] == [{"Ref": topic}]
    statements = policy["PolicyDocument"]["Statement"]
    allows = [s for s in statements if s["Effect"] == "Allow"]
    assert allows == [
        {
            "Action": "sns:Publish",
            "Condition": {
                "ArnEquals": {
                    "aws:SourceArn": [{"Fn::GetAtt": [rule, "Arn"]}, {"Fn::GetAtt": [question_rule, "Arn"]}]
                }
            },
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Resource": {"Ref": topic},
            "Sid": allows[0]["Sid"],
        }
    ]
    [deny] = [s for s in statements if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert (deny["Principal"], deny["Action"], deny["Resource"]) == ("*", "sns:Publish", {"Ref": topic})


@pytest.mark.slow
def test_the_rule_sends_each_approval_requested_as_a_readable_message(emails_template: Any) -> None:
    [bus] = emails_template.find_resources("AWS::Events::EventBus")
    _, rule = _approval_rule(emails_template)
    topic, _ = _one(emails_template, "AWS::SNS::Topic")
    assert rule["EventBusName"] == {"Ref": bus}
    assert rule["EventPattern"] == {
        "source": ["toolpipe"],
        "detail-type": ["ApprovalRequested"],
        "detail": {"kind": ["approval"]},
    }
    [target] = rule["Targets"]
    assert target["Arn"] == {"Ref": topic} and "RoleArn" not in target
    text = _render(target["InputTransformer"], DETAIL)
    assert text == (
        "A call to the tool send_email waits for your approval (run r-1, approval 3f2a9c).\n\n"
        f"Open this link to see its arguments and approve or deny it: {DETAIL['callback_url']}\n\n"
        "Anyone holding this link can decide until it expires at 2026-11-23T21:00:00+00:00 (UTC); the "
        "first decision wins, here or through the API, and later ones change nothing. The link "
        "approves or denies the arguments as they are; to change them, an authenticated approver "
        "runs: toolpipe approve 3f2a9c --arguments '...'. If nobody decides by then, the call counts "
        "as denied and is not run."
    )
    assert "secret plans" not in text  # never the arguments: an email crosses mail systems
    assert "works once" not in text  # the rule is first decision wins, whoever holds the link


@pytest.mark.slow
def test_a_question_for_a_person_is_worded_as_one_and_never_quotes_the_question(emails_template: Any) -> None:
    [bus] = emails_template.find_resources("AWS::Events::EventBus")
    _, rule = _approval_rule(emails_template, "human")
    topic, _ = _one(emails_template, "AWS::SNS::Topic")
    assert rule["EventBusName"] == {"Ref": bus}
    assert rule["EventPattern"] == {
        "source": ["toolpipe"],
        "detail-type": ["ApprovalRequested"],
        "detail": {"kind": ["human"]},
    }
    [target] = rule["Targets"]
    assert target["Arn"] == {"Ref": topic} and "RoleArn" not in target
    asked = DETAIL | {
        "tool": "ask_user",
        "kind": "human",
        "question": "Is the card 4111 1111 1111 1111 yours?",
    }
    text = _render(target["InputTransformer"], asked)
    assert text == (
        "A question from the agent waits for your answer (tool ask_user, run r-1, question 3f2a9c).\n\n"
        f"Open this link to read it and answer: {DETAIL['callback_url']}\n\n"
        "Anyone holding this link can answer until it expires at 2026-11-23T21:00:00+00:00 (UTC); the "
        "first answer wins, and later ones change nothing. If nobody answers by then, the agent is "
        "told that no answer came."
    )
    assert "4111" not in text and "secret plans" not in text  # the page shows them, not the email


@pytest.mark.slow
def test_every_field_the_message_reads_is_in_the_approval_requested_event(emails_template: Any) -> None:
    """Held to the published schema: a field renamed or not yet published (the page's
    `callback_url`) would leave a blank in every email, silently."""
    schema = json.loads((ROOT / "docs" / "events" / "ApprovalRequested.json").read_text())
    assert set(schema["properties"]["kind"]["enum"]) == {"approval", "human"}  # a rule for each
    for kind in ("approval", "human"):
        _, rule = _approval_rule(emails_template, kind)
        read = {
            p.removeprefix("$.detail.")
            for p in rule["Targets"][0]["InputTransformer"]["InputPathsMap"].values()
        }
        assert read - set(schema["properties"]) == set()
        assert read >= {"callback_url", "tool", "run_id"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ana@example.com", ["ana@example.com"]),
        (" ana@example.com , bob@example.org,", ["ana@example.com", "bob@example.org"]),
        (["ana@example.com", "ana@example.com"], ["ana@example.com"]),
        ("", []),
        (None, []),
    ],
)
def test_addresses_from_context_or_a_list(value: Any, expected: list[str]) -> None:
    assert parse_addresses(value) == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("ana@example.com,bob", "approval_emails: 'bob' is not an email address"),
        (
            "ana@example.com;bob@example.org",
            "approval_emails: 'ana@example.com;bob@example.org' is not an email address",
        ),
        ("Ana <ana@example.com>", "approval_emails: 'Ana <ana@example.com>' is not an email address"),
        (["ana@example.com", ""], "approval_emails: '' is not an email address"),
        ([42], "approval_emails: 42 is not an email address"),
    ],
)
def test_a_bad_address_stops_the_stack_with_one_line_naming_it(value: Any, error: str) -> None:
    from aws_cdk import App

    from toolpipe.infra.cdk.stack import ToolpipeStack

    app = App(context={"approval_emails": value})
    with pytest.raises(ValueError) as raised:
        ToolpipeStack(app, "Toolpipe")
    assert str(raised.value) == error
    assert app.node.find_child("Toolpipe").node.children == []  # checked before anything is built


@pytest.mark.slow
def test_with_link_edits_on_the_api_takes_edits_from_links_and_the_email_says_so(
    tmp_path_factory: pytest.TempPathFactory, template: Any
) -> None:
    from tests.infra.test_approval_links import _function
    from toolpipe.infra.cdk.functions import API

    edits = _synth({"approval_emails": APPROVERS, "link_edits": "true"}, tmp_path_factory.mktemp("cdk.out"))
    env = _function(edits, API.handler)[1]["Properties"]["Environment"]["Variables"]
    assert env["TOOLPIPE_LINK_EDITS"] == "true"
    # Off by default, and said so: the API function refuses edits from a link.
    default_env = _function(template, API.handler)[1]["Properties"]["Environment"]["Variables"]
    assert default_env["TOOLPIPE_LINK_EDITS"] == "false"
    _, rule = _approval_rule(edits)
    text = _render(rule["Targets"][0]["InputTransformer"], DETAIL)
    assert "The link can also approve with edited arguments. If nobody decides by then" in text
    assert "--arguments" not in text


@pytest.mark.parametrize("value", ["maybe", "1", ""])
def test_a_link_edits_value_that_is_not_a_boolean_stops_the_stack_with_one_line(value: str) -> None:
    from aws_cdk import App

    from toolpipe.infra.cdk.stack import ToolpipeStack

    app = App(context={"link_edits": value})
    with pytest.raises(ValueError) as raised:
        ToolpipeStack(app, "Toolpipe")
    assert str(raised.value) == f"link_edits must be true or false, not {value!r}"
