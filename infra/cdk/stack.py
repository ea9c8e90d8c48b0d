"""The toolpipe stack: one `ToolPipeline` (infra/cdk/pipeline.py) and its outputs.

Settings come from CDK context (`cdk deploy -c NAME=VALUE`, or `context` in cdk.json):
`api_auth` ("iam" or "api_key"), `api_throttle_rate` and `api_throttle_burst` (the stage's, and
each key's with api_key), `quota_starts_per_minute` and `quota_running` (per caller, 0: off),
`model_rate_per_minute`, `model_rate_burst` and `model_rate_max_wait` (the model's rate governor,
0: off; docs/concepts/runs.md), `api_reserved_concurrency`, `orchestrator_reserved_concurrency`,
`worker_max_concurrency`,
`alarms` ("false": none) and `alarm_topic_arn` (an SNS topic's ARN, or "create"),
`api_gateway_cloudwatch_role` ("false": the stage logs nothing and the region's API Gateway
account setting is left alone; docs/operations/deploy.md "API Gateway's CloudWatch role"),
`admin_principal`, `mcp_header_secrets` (comma-separated ARNs), `approval_emails`
(comma-separated addresses, emailed each call that waits for approval), `link_edits` ("true":
whoever holds an approval link may also approve with edited arguments), `model_key_secret_arn` (a
secret's complete ARN, or `none`), `model_key_kms_key_arn`, `tracing` ("false": the
functions neither trace nor load X-Ray; README "Cold start"), `otel_endpoint`,
`otel_collector_layer_arn` and `otel_capture_content` (where each run's OpenTelemetry trace
goes; README "Observability"), `retention_days` (how long an ended run is kept, 30 by
default; README "Retention"), `runners` (the named tool runners, comma-separated or a list:
a function and role each; docs/operations/security.md "A runner per trust boundary") and
`prices` (a JSON object over the price table of a run's cost; README "What a run cost"). `model_name` and
`model_base_url` reach it from `infra/cdk/app.py`.
"""

import hashlib
import json
import os
import re
from collections.abc import Sequence
from typing import Any

from aws_cdk import CfnElement, CfnOutput, Stack
from constructs import Construct, Node

from toolpipe.infra.cdk.constructs import ApiAuth, ReservedConcurrency, Throttle
from toolpipe.infra.cdk.constructs.approval_emails import parse_addresses
from toolpipe.infra.cdk.constructs.otel import OtelExport
from toolpipe.infra.cdk.constructs.storage import retention_days_of
from toolpipe.infra.cdk.constructs.triggers import TriggerOptions
from toolpipe.infra.cdk.pipeline import ToolPipeline

PIPELINE_ID = "Pipeline"


class ToolpipeStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_base_url: str = "",
        model_name: str = "gpt-4o-mini",
        app: str | None = None,
        packages: Sequence[str] = (),
        requirements: Sequence[str] = (),
        requirements_lock: str | os.PathLike[str] | None = None,
        runners: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """`app`, `packages`, `requirements_lock`: your agents' module and what it needs (as for
        `ToolPipeline`); `runners`: the named tool runners your tools name (None: the `runners`
        context key's); every other setting comes from CDK context."""
        super().__init__(scope, construct_id, **kwargs)
        # Set before any resource exists: logical ids are allocated (for cdk-nag's findings)
        # while the pipeline is being built.
        self._path = self.node.path
        pipeline_path = f"{self._path}/{PIPELINE_ID}"
        self._flattened = {pipeline_path} | {f"{pipeline_path}/{c}" for c in ToolPipeline.COMPONENTS}
        self._logical_ids: dict[str, str] = {}
        self.pipeline = ToolPipeline(
            self,
            PIPELINE_ID,
            model_name=model_name,
            model_base_url=model_base_url,
            app=app,
            packages=packages,
            requirements=requirements,
            requirements_lock=requirements_lock,
            **{
                **pipeline_settings(self.node),
                **({} if runners is None else {"runners": list(runners)}),
            },
        )
        p = self.pipeline
        CfnOutput(self, "ApiUrl", value=p.rest_api.url)
        CfnOutput(self, "StateMachineArn", value=p.state_machine.state_machine_arn)
        CfnOutput(self, "TableName", value=p.table.table_name)
        if p.model_key is not None:
            # Where to put the key (`put-secret-value`), or the secret you gave.
            CfnOutput(self, "ModelApiKeySecretArn", value=p.model_key.secret_arn)
        CfnOutput(self, "ToolDeadLetterQueueUrl", value=p.tool_queue.dead_letters.queue_url)
        CfnOutput(
            self, "ExecutionEndedDeadLetterQueueUrl", value=p.run_flow.execution_ended_dead_letters.queue_url
        )
        CfnOutput(self, "EventBusName", value=p.run_events.bus.event_bus_name)
        # Triggers (README "Triggers"): where files go, and where failed trigger events wait.
        CfnOutput(self, "InputBucketName", value=p.triggers.bucket.bucket_name)
        CfnOutput(self, "TriggerDeadLetterQueueUrl", value=p.triggers.dead_letters.queue_url)
        if p.approval_emails is not None:
            # Subscribe more endpoints (a chat webhook, a queue) to the same messages.
            CfnOutput(self, "ApprovalTopicArn", value=p.approval_emails.topic.topic_arn)
        if p.alarms is not None and p.alarms.topic is not None:
            # Where the alarms notify: subscribe an address, a chat webhook or a pager to it.
            CfnOutput(self, "AlarmTopicArn", value=p.alarms.topic.topic_arn)
        if p.api.api_key is not None:
            # The id, not the value: `aws apigateway get-api-key --api-key ID --include-value`.
            CfnOutput(self, "ApiKeyId", value=p.api.api_key.key_id)

    def _allocate_logical_id(self, cfn_element: CfnElement) -> str:
        """The logical id the resource had when this stack built everything in one scope.

        A changed logical id is a new resource to CloudFormation: the retained table, bucket and
        secret would be orphaned and replaced by empty ones. So the pipeline's and its
        components' construct ids are left out of the path the id is made from; constructs
        added to the pipeline since (run events, triggers) keep theirs. A stack of your own
        holding a `ToolPipeline` uses CDK's ids, which include the whole path.

        (CDK's protected `allocateLogicalId`: jsii names protected members with a leading `_`.)

        The CDK asks again each time a reference to the element resolves (~3,200 times a
        synthesis, ~20 per element), each a call from its node process to this one: the id is
        kept per element, by the reference jsii holds it by, so that reading the element's path
        (two more calls to node each time) happens once.
        """
        ref = cfn_element.__jsii_ref__.ref  # type: ignore[attr-defined]  # jsii's id of the object
        kept = self._logical_ids.get(ref)
        if kept is None:
            kept = _make_unique_id(kept_ids(self._path, cfn_element.node.path, self._flattened))
            self._logical_ids[ref] = kept
        return kept


def kept_ids(stack_path: str, path: str, flattened: set[str]) -> list[str]:
    """The construct ids under the stack on an element's path, less those of the scopes whose
    paths are `flattened`. From the path alone: a construct's path is its scopes' ids joined by
    "/" (an id cannot hold one), and asking jsii for each scope's id and path (`node.scopes`)
    cost ~19 calls to the CDK's node process per element, most of a synthesis's time."""
    ids = path[len(stack_path) + 1 :].split("/")
    scopes = [f"{stack_path}/{'/'.join(ids[: i + 1])}" for i in range(len(ids))]
    return [i for i, scope in zip(ids, scopes, strict=True) if scope not in flattened]


def pipeline_settings(node: Node) -> dict[str, Any]:
    """`ToolPipeline`'s deployment choices from CDK context; a bad value is a one-line error."""
    settings: dict[str, Any] = {"api_auth": ApiAuth.parse(node.try_get_context("api_auth") or "iam")}
    throttle = _throttle(node)
    if throttle is not None:
        settings["api_throttle"] = throttle
    for name in (
        "quota_starts_per_minute",
        "quota_running",
        "worker_max_concurrency",
        "model_rate_burst",
        "model_rate_max_wait",
    ):
        value = node.try_get_context(name)
        if value is not None:
            settings[name] = _number(name, value, int)
    rate = node.try_get_context("model_rate_per_minute")
    if rate is not None:
        settings["model_rate_per_minute"] = _number("model_rate_per_minute", rate, float)
    reserved = {
        name: _number(f"{name}_reserved_concurrency", value, int)
        for name in ("api", "orchestrator")
        if (value := node.try_get_context(f"{name}_reserved_concurrency")) not in (None, "", 0, "0")
    }
    if reserved:
        settings["reserved_concurrency"] = ReservedConcurrency(**reserved)
    flags = {
        "alarms": node.try_get_context("alarms"),
        # `-c api_gateway_cloudwatch_role=false`: no logging role made here, and no stage logs.
        "api_gateway_cloudwatch_role": node.try_get_context("api_gateway_cloudwatch_role"),
        "tracing": node.try_get_context("tracing"),
        # `-c link_edits=true`: a signed link may approve with edited arguments (README "The approval link").
        "link_edits": node.try_get_context("link_edits"),
    }
    settings |= {name: _flag(name, value) for name, value in flags.items() if value is not None}
    settings |= _texts(node)
    settings["triggers"] = TriggerOptions.from_context(node)  # the trigger_* keys (README "Triggers")
    settings |= _lists(node)
    retention = node.try_get_context("retention_days")
    if retention is not None:
        settings["retention_days"] = retention_days_of(retention)
    prices = node.try_get_context("prices")
    if prices:
        # `-c prices='{"region": "eu-west-1", ...}'`, or an object in cdk.json; checked by the pipeline.
        settings["prices"] = _json_object("prices", prices)
    otel = _otel(node)
    if otel is not None:
        settings["otel"] = otel
    return settings


def _lists(node: Node) -> dict[str, list[str]]:
    """The settings that name several things, comma-separated with `-c` or a list in cdk.json."""
    found: dict[str, list[str]] = {}
    # `-c approval_emails=a@example.com,b@example.com`.
    emails = parse_addresses(node.try_get_context("approval_emails"))
    if emails:
        found["approval_emails"] = emails
    # `-c runners=mail,files`: each name is checked by the pipeline.
    for name in ("runners", "mcp_header_secrets"):
        value = node.try_get_context(name)
        if value:
            items = value if isinstance(value, list) else str(value).split(",")
            found[name] = [str(item).strip() for item in items if str(item).strip()]
    return found


def _otel(node: Node) -> OtelExport | None:
    """`-c otel_endpoint=URL` and/or `-c otel_collector_layer_arn=ARN` (README "Observability")."""
    endpoint = node.try_get_context("otel_endpoint")
    layer = node.try_get_context("otel_collector_layer_arn")
    if not endpoint and not layer:
        return None
    capture = node.try_get_context("otel_capture_content")
    return OtelExport(
        endpoint=str(endpoint).strip() if endpoint else None,
        collector_layer_arn=str(layer).strip() if layer else None,
        capture_content=False if capture is None else _flag("otel_capture_content", capture),
    )


def _throttle(node: Node) -> Throttle | None:
    rate, burst = node.try_get_context("api_throttle_rate"), node.try_get_context("api_throttle_burst")
    if rate is None and burst is None:
        return None
    default = Throttle()
    return Throttle(
        rate_per_second=default.rate_per_second
        if rate is None
        else _number("api_throttle_rate", rate, float),
        burst=default.burst if burst is None else _number("api_throttle_burst", burst, int),
    )


def _texts(node: Node) -> dict[str, str]:
    texts = {
        "alarm_topic": node.try_get_context("alarm_topic_arn"),
        # `-c model_key_secret_arn=arn:…` (yours, read as is), `none` (no key), or unset (created empty).
        "model_key_secret": node.try_get_context("model_key_secret_arn"),
        "model_key_kms_key_arn": node.try_get_context("model_key_kms_key_arn"),
    }
    settings = {name: str(value).strip() for name, value in texts.items() if value}
    admin = node.try_get_context("admin_principal")
    if admin:
        settings["admin_principal"] = str(admin)
    return settings


def _json_object(name: str, value: object) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(str(value))
    except ValueError as e:
        raise ValueError(f"{name} must be a JSON object, not {value!r} ({e})") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{name} must be a JSON object, not {value!r}")
    return parsed


def _flag(name: str, value: object) -> bool:
    # `-c name=VALUE` arrives as a string, cdk.json's as a JSON boolean.
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise ValueError(f"{name} must be true or false, not {value!r}")


def _number(name: str, value: object, kind: type[int] | type[float]) -> Any:
    # `-c name=VALUE` arrives as a string, cdk.json's as a JSON number.
    try:
        return kind(str(value))
    except ValueError:
        raise ValueError(
            f"{name} must be {'an integer' if kind is int else 'a number'}, not {value!r}"
        ) from None


# CDK's `makeUniqueId` (aws-cdk-lib core/lib/private/uniqueid.ts, which it does not export):
# every logical id CDK has allocated depends on it, so it cannot change without breaking every
# deployed CDK stack. `tests/infra/test_stack.py` holds the ids it gives against known ones.
_HIDDEN_ID, _HIDDEN_FROM_HUMAN_ID = "Default", "Resource"


def _make_unique_id(components: list[str]) -> str:
    components = [c for c in components if c != _HIDDEN_ID]
    if len(components) == 1 and len(candidate := _alphanumeric(components[0])) <= 255:
        return candidate
    digest = hashlib.md5("/".join(components).encode(), usedforsecurity=False).hexdigest()[:8].upper()
    human: list[str] = []
    for c in components:
        if not human or not human[-1].endswith(c):
            human.append(c)
    return "".join(_alphanumeric(c) for c in human if c != _HIDDEN_FROM_HUMAN_ID)[:240] + digest


def _alphanumeric(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "", text)
