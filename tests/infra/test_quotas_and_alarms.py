"""Quotas and alarms on the synthesized template (issue 19, items 5 and 7): the per-caller
quotas reach the API function, reserved concurrency when asked, the worker's maximum
concurrency, the stage throttled in every auth mode, and an alarm for each thing an operator
must act on, with the docs' runbook (docs/operations/observability.md) naming each."""

import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_auth import _synth
from toolpipe.infra.cdk.constructs.functions import WORKER_MAX_CONCURRENCY

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "operations" / "observability.md"


def _function(template: Any, handler: str) -> dict[str, Any]:
    (props,) = [
        r["Properties"]
        for r in template.find_resources("AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") == handler
    ]
    return props


API_HANDLER = "toolpipe.functions.api.handler.lambda_handler"
ORCHESTRATOR_HANDLER = "toolpipe.functions.orchestrator.handler.lambda_handler"


def test_the_default_quotas_reach_the_api_function(template: Any) -> None:
    env = _function(template, API_HANDLER)["Environment"]["Variables"]
    assert env["TOOLPIPE_QUOTA_STARTS_PER_MINUTE"] == "60"
    assert env["TOOLPIPE_QUOTA_RUNNING"] == "20"
    # Nothing reserved by default: a new account has too little concurrency to reserve any.
    for handler in (API_HANDLER, ORCHESTRATOR_HANDLER):
        assert "ReservedConcurrentExecutions" not in _function(template, handler)


def test_the_models_rate_governor_is_off_by_default_and_has_its_table(template: Any) -> None:
    env = _function(template, ORCHESTRATOR_HANDLER)["Environment"]["Variables"]
    assert env["TOOLPIPE_MODEL_RATE_PER_MINUTE"] == "0"
    assert (env["TOOLPIPE_MODEL_RATE_BURST"], env["TOOLPIPE_MODEL_RATE_MAX_WAIT"]) == ("1", "3600")
    (table_id,) = [
        k for k in template.find_resources("AWS::DynamoDB::Table") if k.startswith("ModelRateBudget")
    ]
    assert env["TOOLPIPE_MODEL_RATE_TABLE"] == {"Ref": table_id}
    # Only the orchestrator's environment names it (its role alone may use it: tests/functional/
    # test_local_roles.py checks the grants).
    others = [
        r["Properties"].get("Environment", {}).get("Variables", {})
        for r in template.find_resources("AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") != ORCHESTRATOR_HANDLER
    ]
    assert all("TOOLPIPE_MODEL_RATE_TABLE" not in variables for variables in others)


def test_the_workers_event_source_has_a_maximum_concurrency(template: Any) -> None:
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"BatchSize": 1, "ScalingConfig": {"MaximumConcurrency": WORKER_MAX_CONCURRENCY}},
    )


def _stage_throttle(template: Any) -> tuple[float, int]:
    (stage,) = template.find_resources("AWS::ApiGateway::Stage").values()
    (everything,) = [
        s
        for s in stage["Properties"]["MethodSettings"]
        if (s["ResourcePath"], s["HttpMethod"]) == ("/*", "*")
    ]
    return everything["ThrottlingRateLimit"], everything["ThrottlingBurstLimit"]


def test_the_stage_is_throttled_with_iam_auth(template: Any) -> None:
    assert _stage_throttle(template) == (50, 100)


@pytest.mark.slow
def test_settings_from_context_reach_the_template(tmp_path: Path) -> None:
    t = _synth(
        {
            "api_auth": "api_key",
            "api_throttle_rate": "7",
            "api_throttle_burst": "9",
            "quota_starts_per_minute": "5",
            "quota_running": "0",
            "api_reserved_concurrency": "4",
            "orchestrator_reserved_concurrency": "30",
            "worker_max_concurrency": "2",
            "alarm_topic_arn": "create",
            "model_rate_per_minute": "90",
            "model_rate_burst": "3",
            "model_rate_max_wait": "600",
        },
        tmp_path,
    )
    # Throttled at the stage and per key alike.
    assert _stage_throttle(t) == (7, 9)
    (plan,) = t.find_resources("AWS::ApiGateway::UsagePlan").values()
    assert plan["Properties"]["Throttle"] == {"RateLimit": 7, "BurstLimit": 9}
    api, orchestrator = _function(t, API_HANDLER), _function(t, ORCHESTRATOR_HANDLER)
    assert api["Environment"]["Variables"]["TOOLPIPE_QUOTA_STARTS_PER_MINUTE"] == "5"
    assert api["Environment"]["Variables"]["TOOLPIPE_QUOTA_RUNNING"] == "0"
    assert (api["ReservedConcurrentExecutions"], orchestrator["ReservedConcurrentExecutions"]) == (4, 30)
    rate = {
        k: v
        for k, v in orchestrator["Environment"]["Variables"].items()
        if k.startswith("TOOLPIPE_MODEL_RATE_")
    }
    assert {k: v for k, v in rate.items() if k != "TOOLPIPE_MODEL_RATE_TABLE"} == {
        "TOOLPIPE_MODEL_RATE_PER_MINUTE": "90",
        "TOOLPIPE_MODEL_RATE_BURST": "3",
        "TOOLPIPE_MODEL_RATE_MAX_WAIT": "600",
    }
    t.has_resource_properties("AWS::Lambda::EventSourceMapping", {"ScalingConfig": {"MaximumConcurrency": 2}})
    # A topic of the stack's, which every alarm notifies, into alarm and back.
    topics = t.find_resources("AWS::SNS::Topic")
    assert len(topics) == 1
    (topic_id,) = topics
    for alarm in t.find_resources("AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}]
        assert alarm["Properties"]["OKActions"] == [{"Ref": topic_id}]
    t.has_output("AlarmTopicArn", {"Value": {"Ref": topic_id}})
    (topic,) = topics.values()
    assert [s["id"] for s in topic["Metadata"]["checkov"]["skip"]] == ["CKV_AWS_26"]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"quota_running": "-1"}, "quota_running must be a whole number, 0 or more"),
        ({"quota_running": "5000"}, "quota_running must be at most 1,000, not 5000"),
        ({"quota_starts_per_minute": "lots"}, "quota_starts_per_minute must be an integer, not 'lots'"),
        ({"worker_max_concurrency": "1"}, "worker_max_concurrency must be 2 to 1,000"),
        ({"api_reserved_concurrency": "-3"}, "api_reserved_concurrency must be 1 to 10,000"),
        ({"alarm_topic_arn": "my-topic"}, "alarm_topic_arn must be an SNS topic's ARN or 'create'"),
        ({"alarms": "maybe"}, "alarms must be true or false"),
        ({"model_rate_per_minute": "lots"}, "model_rate_per_minute must be a number, not 'lots'"),
        (
            {"model_rate_per_minute": "-5"},
            "model_rate_per_minute: Input should be greater than or equal to 0",
        ),
        ({"model_rate_burst": "0"}, "model_rate_burst: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_quota_or_alarm_setting_is_refused_in_one_line(
    context: dict[str, Any], message: str, tmp_path: Path
) -> None:
    from aws_cdk import App

    from toolpipe.infra.cdk.app import SKIP_BUNDLING
    from toolpipe.infra.cdk.stack import ToolpipeStack

    app = App(outdir=str(tmp_path), context=context, post_cli_context=SKIP_BUNDLING)
    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        ToolpipeStack(app, "Toolpipe")
    assert "\n" not in str(refused.value)


# Each alarm: its metric, and the dimension that names what it watches.
ALARMS = {
    "ToolDeadLettersAlarm": ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
    "ExecutionEndedDeadLettersAlarm": ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
    "TriggerDeadLettersAlarm": ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
    "ExecutionsFailedAlarm": ("AWS/States", "ExecutionsFailed"),
    "ExecutionsTimedOutAlarm": ("AWS/States", "ExecutionsTimedOut"),
    "OrchestratorThrottlesAlarm": ("AWS/Lambda", "Throttles"),
    "ToolWorkerThrottlesAlarm": ("AWS/Lambda", "Throttles"),
    "ToolRunnerThrottlesAlarm": ("AWS/Lambda", "Throttles"),
    "ApiThrottlesAlarm": ("AWS/Lambda", "Throttles"),
    "TriggersThrottlesAlarm": ("AWS/Lambda", "Throttles"),
}


def test_an_alarm_watches_each_dead_letter_queue_the_executions_and_each_functions_throttles(
    template: Any,
) -> None:
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    found = {}
    for logical_id, alarm in alarms.items():
        (name,) = [n for n in ALARMS if logical_id.startswith(f"Alarms{n}")]
        found[name] = alarm["Properties"]
    assert set(found) == set(ALARMS)
    for name, (namespace, metric) in ALARMS.items():
        props = found[name]
        assert (props["Namespace"], props["MetricName"]) == (namespace, metric), name
        assert props["Threshold"] == 0 and props["ComparisonOperator"] == "GreaterThanThreshold"
        assert props["TreatMissingData"] == "notBreaching"
        assert "AlarmActions" not in props  # no topic unless asked for
    # Each watches its own resource.
    refs = {name: props["Dimensions"][0]["Value"] for name, props in found.items()}
    assert refs["ExecutionEndedDeadLettersAlarm"] == {
        "Fn::GetAtt": [_id(template, "ExecutionEndedDeadLetters"), "QueueName"]
    }
    assert len({str(v) for v in refs.values()}) == len(refs) - 1  # the two execution alarms share the machine


def _id(template: Any, prefix: str) -> str:
    (logical_id,) = [k for k in template.find_resources("AWS::SQS::Queue") if k.startswith(prefix)]
    return logical_id


def test_the_docs_runbook_has_a_line_for_each_alarm() -> None:
    text = RUNBOOK.read_text(encoding="utf-8")
    section = text.split("\n## Alarms", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+Alarm)` \|", section, re.MULTILINE))
    assert listed == set(ALARMS)
