"""The limits AWS applies to a template's values as they resolve at deploy time, checked offline.

cfn-lint, checkov and cdk-nag read the template as written: a `Ref` or an `Fn::Join` counts as
the few characters of its JSON, so a setting that grows an environment or a policy once its ARNs
are filled in passes them all, and CloudFormation then fails the stack half way (cfn-lint's
E3697 counts literal strings only). Here every reference resolves to the longest value AWS could
give it (`WorstCase`): the longest region, partition and URL suffix, and names as long as
CloudFormation generates them for the resource type. Then:

- Lambda: each function's environment, as Lambda measures it (the variables as compact JSON,
  "String measured: {...}" in its refusal), at most 4 KB; at most 5 layers; code and layers
  together at most 250 MB unzipped, where the assets' sizes are known (a bundled synthesis);
- IAM: a role's inline policies together at most 10,240 characters, a managed policy at most
  6,144, a trust policy at most 2,048 (whitespace not counted), at most 10 managed policies a role;
- Step Functions: a task's heartbeat shorter than its timeout, literal or read from a path the
  orchestrator fills from its environment (`CallTimeouts`).

https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html,
https://docs.aws.amazon.com/step-functions/latest/dg/state-task.html.

`make check-deploy` runs these on the template (`aws-limits`), `synth` refuses a breach in one line
naming the setting that caused it (`infra/cdk/app.py`), and the local runtime refuses to start from
a template that breaks one (`infra/local/deployment.py`), as CloudFormation would refuse to create it.
"""

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolpipe.infra.cdk.intrinsics import IntrinsicError, Resolver
from toolpipe.shared.settings import CallTimeouts

LAMBDA_ENVIRONMENT_BYTES = 4096
LAMBDA_LAYERS = 5
LAMBDA_UNZIPPED_BYTES = 262_144_000  # 250 MB, the function's code and its layers together
ROLE_INLINE_POLICY_CHARS = 10_240
MANAGED_POLICY_CHARS = 6_144
TRUST_POLICY_CHARS = 2_048
MANAGED_POLICIES_PER_ROLE = 10

# The longest values deploy time could give: `us-gov-west-1` is shorter than these.
LONGEST_REGION = "ap-southeast-5"
LONGEST_PARTITION = "aws-us-gov"
LONGEST_URL_SUFFIX = "amazonaws.com.cn"
ACCOUNT = "123456789012"
# CloudFormation's generated names: `{stack}-{logical id}-{13 random}`, cut to the type's limit.
_GENERATED_SUFFIX = "-ABCDEFGHIJKLM"
_NAME_LIMITS = {
    "AWS::Lambda::Function": 64,
    "AWS::SQS::Queue": 80,
    "AWS::S3::Bucket": 63,
    "AWS::IAM::Role": 64,
    "AWS::IAM::Policy": 128,
    "AWS::IAM::ManagedPolicy": 128,
    "AWS::StepFunctions::StateMachine": 80,
    "AWS::Events::EventBus": 256,
    "AWS::Events::Rule": 64,
    "AWS::SecretsManager::Secret": 512,
    "AWS::Logs::LogGroup": 512,
    "AWS::DynamoDB::Table": 255,
    "AWS::SNS::Topic": 256,
}
# The property a resource's own name is in, when the template sets one.
_NAME_PROPERTIES = (
    "FunctionName",
    "QueueName",
    "BucketName",
    "RoleName",
    "PolicyName",
    "ManagedPolicyName",
    "StateMachineName",
    "TableName",
    "TopicName",
    "LogGroupName",
    "Name",
)
# What `Ref` gives, by type, when it is not the name (CloudFormation's return values).
_REF_IS_ARN = {
    "AWS::Lambda::Version",
    "AWS::Lambda::Alias",
    "AWS::SNS::Topic",
    "AWS::StepFunctions::StateMachine",
    "AWS::SecretsManager::Secret",
    "AWS::Lambda::LayerVersion",
    "AWS::IAM::ManagedPolicy",
}
_ID_LENGTH = {"AWS::ApiGateway::RestApi": 10, "AWS::KMS::Key": 36, "AWS::ApiGateway::ApiKey": 10}


@dataclass(frozen=True)
class Breach:
    """One value over one AWS limit: the resource, the limit, and how far over."""

    resource: str
    limit: str
    measured: int
    allowed: int
    unit: str = "bytes"

    def line(self) -> str:
        return f"{self.resource}: {self.limit} is {self.measured:,} {self.unit}, over AWS's {self.allowed:,}"


class WorstCase:
    """Resolves a template's intrinsics to the longest values deploy time could give them."""

    def __init__(self, template: Mapping[str, Any], stack_name: str = "Toolpipe") -> None:
        self._resources: dict[str, Any] = dict(template.get("Resources", {}))
        self._stack = stack_name
        refs = {
            **_parameters(template.get("Parameters") or {}),
            **{logical_id: self._ref(logical_id) for logical_id in self._resources},
        }
        attributes = {
            (logical_id, attribute): self._attribute(logical_id, attribute)
            for logical_id in self._resources
            for attribute in ("Arn", "QueueUrl", "QueueName", "Name", "RootResourceId", "StreamArn")
        }
        self._resolver = _Lenient(
            refs,
            attributes,
            region=LONGEST_REGION,
            account=ACCOUNT,
            stack_name=stack_name,
            partition=LONGEST_PARTITION,
            url_suffix=LONGEST_URL_SUFFIX,
        )

    def resolve(self, value: Any) -> Any:
        return self._resolver.resolve(value)

    def _type(self, logical_id: str) -> str:
        return str(self._resources[logical_id].get("Type", ""))

    def name(self, logical_id: str) -> str:
        props = self._resources[logical_id].get("Properties") or {}
        for key in _NAME_PROPERTIES:
            if isinstance(props.get(key), str):
                return str(props[key])
        limit = _NAME_LIMITS.get(self._type(logical_id), 128)
        return f"{self._stack}-{logical_id}{_GENERATED_SUFFIX}"[:limit]

    def _ref(self, logical_id: str) -> str:
        kind = self._type(logical_id)
        if kind == "AWS::SQS::Queue":
            return self._queue_url(logical_id)
        if kind in _REF_IS_ARN:
            return self._attribute(logical_id, "Arn")
        if kind in _ID_LENGTH:
            return "x" * _ID_LENGTH[kind]
        return self.name(logical_id)

    def _bus_of(self, logical_id: str) -> str:
        bus = (self._resources[logical_id].get("Properties") or {}).get("EventBusName")
        if bus is None or bus == "default":
            return ""
        # A bus named or given by its ARN, one this template makes, else a name at its longest.
        if isinstance(bus, str):
            return f"{bus.rsplit('/', 1)[-1]}/"
        reference = bus.get("Ref") or (bus.get("Fn::GetAtt") or [None])[0] if isinstance(bus, dict) else None
        if isinstance(reference, str) and reference in self._resources:
            return f"{self.name(reference)}/"
        return "x" * _NAME_LIMITS["AWS::Events::EventBus"] + "/"

    def _function_of(self, logical_id: str) -> str:
        function = (self._resources[logical_id].get("Properties") or {}).get("FunctionName")
        if isinstance(function, str):
            return function.rsplit(":", 1)[-1]
        reference = function.get("Ref") if isinstance(function, dict) else None
        if isinstance(reference, str) and reference in self._resources:
            return self.name(reference)
        return "x" * _NAME_LIMITS["AWS::Lambda::Function"]

    def _queue_url(self, logical_id: str) -> str:
        return f"https://sqs.{LONGEST_REGION}.{LONGEST_URL_SUFFIX}/{ACCOUNT}/{self.name(logical_id)}"

    def _attribute(self, logical_id: str, attribute: str) -> str:
        if attribute == "QueueUrl":
            return self._queue_url(logical_id)
        if attribute != "Arn" and not attribute.endswith("Arn"):
            return self.name(logical_id)
        kind = self._type(logical_id)
        service = {"StepFunctions": "states", "Logs": "logs"}.get(
            kind.split("::")[1], kind.split("::")[1].lower()
        )
        name = self.name(logical_id)
        if kind == "AWS::DynamoDB::Table" and attribute == "StreamArn":
            # The stream's label is the time it was created, to the millisecond.
            return f"{self._attribute(logical_id, 'Arn')}/stream/2026-01-01T00:00:00.000"
        if kind == "AWS::S3::Bucket":
            return f"arn:{LONGEST_PARTITION}:s3:::{name}"
        if kind.startswith("AWS::IAM::"):
            return f"arn:{LONGEST_PARTITION}:iam::{ACCOUNT}:{'role' if kind.endswith('Role') else 'policy'}/{name}"
        resource = {
            "AWS::Lambda::Function": f"function:{name}",
            # A version's or an alias's ARN is its function's, qualified.
            "AWS::Lambda::Version": f"function:{self._function_of(logical_id)}:99999",
            "AWS::Lambda::Alias": f"function:{self._function_of(logical_id)}:{name}",
            "AWS::Lambda::LayerVersion": f"layer:{name}:999",
            "AWS::StepFunctions::StateMachine": f"stateMachine:{name}",
            "AWS::DynamoDB::Table": f"table/{name}",
            "AWS::Events::EventBus": f"event-bus/{name}",
            # A rule on a bus other than the default is `rule/{bus}/{rule}`.
            "AWS::Events::Rule": f"rule/{self._bus_of(logical_id)}{name}",
            "AWS::KMS::Key": f"key/{'x' * _ID_LENGTH['AWS::KMS::Key']}",
            "AWS::SecretsManager::Secret": f"secret:{name}-AbCdEf",
            "AWS::Logs::LogGroup": f"log-group:{name}:*",
        }.get(kind, name)
        return f"arn:{LONGEST_PARTITION}:{service}:{LONGEST_REGION}:{ACCOUNT}:{resource}"


def _parameters(parameters: Mapping[str, Any]) -> dict[str, str]:
    """What `Ref` gives each parameter at its longest, where the template says: its `MaxLength`,
    else the longest of its `AllowedValues`, else its `Default` (what `cdk deploy` passes unless
    told otherwise). A parameter of none of these is measured as written."""
    values: dict[str, str] = {}
    for name, parameter in parameters.items():
        if not isinstance(parameter, dict) or str(parameter.get("Type", "String")) != "String":
            continue  # a list, a number, an SSM parameter's value: not known here
        if str(parameter.get("MaxLength", "")).isdigit():
            values[name] = "x" * int(parameter["MaxLength"])
        elif parameter.get("AllowedValues"):
            values[name] = max((str(v) for v in parameter["AllowedValues"]), key=len)
        elif "Default" in parameter:
            values[name] = str(parameter["Default"])
    return values


def breaches(
    template: Mapping[str, Any], *, stack_name: str = "Toolpipe", assets: Path | None = None
) -> list[Breach]:
    """Every value of `template` over an AWS limit once deployed. `assets`: the cloud assembly's
    folder, where a bundled synthesis staged the functions' code and layers (their unzipped size
    is then known)."""
    worst = WorstCase(template, stack_name)
    resources: dict[str, Any] = dict(template.get("Resources", {}))
    return [
        *_lambda_breaches(resources, worst, assets),
        *_iam_breaches(resources, worst),
        *_heartbeat_breaches(resources, worst),
    ]


class _Lenient(Resolver):
    """A resolver that measures what it cannot resolve (`Fn::ImportValue`, a parameter of no
    known length) as its JSON text, as cfn-lint does: a template the limits cannot fully resolve
    is still checked, never refused for that. `Fn::If` is its longer branch (deploy time takes one, never both),
    and `Fn::Sub` fills in what `Ref` and `Fn::GetAtt` would give (a CDK app's own `Fn.sub`)."""

    def resolve(self, value: Any) -> Any:
        try:
            if isinstance(value, dict) and len(value) == 1:
                ((name, args),) = value.items()
                if name == "Fn::If" and isinstance(args, list) and len(args) == 3:
                    branches = [self.resolve(branch) for branch in args[1:]]
                    return max(branches, key=lambda branch: len(json.dumps(branch, ensure_ascii=False)))
                if name == "Fn::Sub":
                    return self._sub(args)
                if value == {"Ref": "AWS::NoValue"}:
                    return ""  # the property is left out
            return super().resolve(value)
        except IntrinsicError:
            return json.dumps(value, separators=(",", ":"))

    def _sub(self, args: Any) -> str:
        text, variables = (args[0], args[1]) if isinstance(args, list) else (args, {})

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"  # `${!Literal}` is written `${Literal}`
            if name in variables:
                return str(self.resolve(variables[name]))
            reference: Any = {"Fn::GetAtt": name.split(".", 1)} if "." in name else {"Ref": name}
            return str(self.resolve(reference))

        return re.sub(r"\$\{([^}]*)\}", fill, str(text))


def _lambda_breaches(resources: dict[str, Any], worst: WorstCase, assets: Path | None) -> Iterator[Breach]:
    for logical_id, resource in _of_type(resources, "AWS::Lambda::Function"):
        props = resource.get("Properties") or {}
        variables = worst.resolve((props.get("Environment") or {}).get("Variables") or {})
        size = environment_bytes(variables)
        if size > LAMBDA_ENVIRONMENT_BYTES:
            yield Breach(
                logical_id, "the function's environment (Lambda's 4 KB)", size, LAMBDA_ENVIRONMENT_BYTES
            )
        layers = props.get("Layers") or []
        if len(layers) > LAMBDA_LAYERS:
            yield Breach(logical_id, "the function's layers", len(layers), LAMBDA_LAYERS, "layers")
        if assets is not None:
            unzipped = _unzipped_bytes(resource, layers, resources, assets)
            if unzipped is not None and unzipped > LAMBDA_UNZIPPED_BYTES:
                yield Breach(
                    logical_id,
                    "the function's code and layers unzipped (250 MB)",
                    unzipped,
                    LAMBDA_UNZIPPED_BYTES,
                )


def environment_bytes(variables: Mapping[str, Any]) -> int:
    """An environment's size as Lambda measures it: its variables as compact JSON, in UTF-8."""
    return len(json.dumps(dict(variables), separators=(",", ":"), ensure_ascii=False).encode())


def _unzipped_bytes(
    function: dict[str, Any], layers: list[Any], resources: dict[str, Any], assets: Path
) -> int | None:
    """The function's staged code and layers, summed, where the assembly holds them all."""
    staged = [
        function,
        *(resources.get(layer.get("Ref", ""), {}) for layer in layers if isinstance(layer, dict)),
    ]
    total = 0
    for resource in staged:
        path = (resource.get("Metadata") or {}).get("aws:asset:path")
        folder = assets / path if isinstance(path, str) else None
        if folder is None or not folder.is_dir():
            return None  # not staged here (TOOLPIPE_BUNDLE=0, or a layer of another stack)
        total += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return total


def policy_chars(document: Any) -> int:
    """A policy's size as IAM counts it: its JSON, whitespace not counted."""
    return len(re.sub(r"\s+", "", json.dumps(document, separators=(",", ":"), ensure_ascii=False)))


def _iam_breaches(resources: dict[str, Any], worst: WorstCase) -> Iterator[Breach]:
    for role in (logical_id for logical_id, _ in _of_type(resources, "AWS::IAM::Role")):
        yield from _role_breaches(role, resources, worst)
    for logical_id, resource in _of_type(resources, "AWS::IAM::ManagedPolicy"):
        size = _document_chars(resource, worst)
        if size > MANAGED_POLICY_CHARS:
            yield Breach(logical_id, "the managed policy", size, MANAGED_POLICY_CHARS, "characters")


def _role_breaches(role: str, resources: dict[str, Any], worst: WorstCase) -> Iterator[Breach]:
    """One role's trust policy, managed policy count and inline policies together."""
    props = resources[role].get("Properties") or {}
    trust = policy_chars(worst.resolve(props.get("AssumeRolePolicyDocument") or {}))
    if trust > TRUST_POLICY_CHARS:
        yield Breach(role, "the role's trust policy", trust, TRUST_POLICY_CHARS, "characters")
    managed = len(props.get("ManagedPolicyArns") or [])
    managed += sum(1 for _, p in _of_type(resources, "AWS::IAM::ManagedPolicy") if _names(p, role))
    if managed > MANAGED_POLICIES_PER_ROLE:
        yield Breach(
            role, "the managed policies attached to the role", managed, MANAGED_POLICIES_PER_ROLE, "policies"
        )
    inline = sum(policy_chars(worst.resolve(p.get("PolicyDocument"))) for p in props.get("Policies") or [])
    inline += sum(_document_chars(p, worst) for p in inline_policies(resources, role))
    if inline > ROLE_INLINE_POLICY_CHARS:
        yield Breach(
            role, "the role's inline policies together", inline, ROLE_INLINE_POLICY_CHARS, "characters"
        )


def _document_chars(policy: dict[str, Any], worst: WorstCase) -> int:
    return policy_chars(worst.resolve((policy.get("Properties") or {}).get("PolicyDocument")))


def inline_policies(resources: Mapping[str, Any], role: str) -> list[dict[str, Any]]:
    """The policy resources that are inline policies of `role`: each `AWS::IAM::Policy` naming it
    (the CDK's DefaultPolicy) and each `AWS::IAM::RolePolicy`, which names one role by `RoleName`."""
    return [
        resource
        for resource in resources.values()
        if (resource.get("Type") == "AWS::IAM::Policy" and _names(resource, role))
        or (
            resource.get("Type") == "AWS::IAM::RolePolicy"
            and (resource.get("Properties") or {}).get("RoleName") == {"Ref": role}
        )
    ]


def _names(policy: dict[str, Any], role: str) -> bool:
    """Whether a policy resource attaches to the role `role` (by `Ref`, as the CDK writes it)."""
    return {"Ref": role} in ((policy.get("Properties") or {}).get("Roles") or [])


def _heartbeat_breaches(resources: dict[str, Any], worst: WorstCase) -> Iterator[Breach]:
    """A task whose heartbeat is not shorter than its timeout: AWS refuses literal values at
    create time and fails the execution on values read from paths. The paths toolpipe's tasks read
    (`$.call.<field>`) hold what the orchestrator's environment sets (`CallTimeouts`)."""
    timeouts = _call_timeouts(resources, worst)
    for logical_id, resource in _of_type(resources, "AWS::StepFunctions::StateMachine"):
        props = resource.get("Properties") or {}
        text = worst.resolve(props.get("DefinitionString", ""))
        try:
            definition = json.loads(text) if isinstance(text, str) and text else props.get("Definition") or {}
        except json.JSONDecodeError:
            continue  # a part it could not resolve: asl-validator and asl-rules read the definition
        for name, state in _states(definition):
            heartbeat = _seconds(state, "Heartbeat", timeouts)
            timeout = _seconds(state, "Timeout", timeouts)
            if heartbeat is not None and timeout is not None and heartbeat >= timeout:
                yield Breach(
                    f"{logical_id} state {name}",
                    f"the task's heartbeat (it must be shorter than its timeout, {timeout:,} s)",
                    heartbeat,
                    timeout - 1,
                    "seconds",
                )


def _call_timeouts(resources: dict[str, Any], worst: WorstCase) -> dict[str, int]:
    """The per-call seconds the orchestrator puts in each decision (`$.call.<field>`): its
    environment's, else `CallTimeouts`' defaults."""
    names = set(CallTimeouts.env_names.values())
    found: dict[str, Any] = {}
    for _, resource in _of_type(resources, "AWS::Lambda::Function"):
        variables = ((resource.get("Properties") or {}).get("Environment") or {}).get("Variables") or {}
        if names & set(variables):
            found = worst.resolve(variables)
            break
    seconds = {}
    for field, env in CallTimeouts.env_names.items():
        value = found.get(env, CallTimeouts.model_fields[field].default)
        if isinstance(value, int | str) and str(value).isdigit():
            seconds[field] = int(value)
    return seconds


def _seconds(state: dict[str, Any], kind: str, timeouts: Mapping[str, int]) -> int | None:
    literal = state.get(f"{kind}Seconds")
    if isinstance(literal, int):
        return literal
    path = state.get(f"{kind}SecondsPath")
    if isinstance(path, str) and path.startswith("$.call."):
        return timeouts.get(path.removeprefix("$.call."))
    return None


def _states(definition: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in (definition.get("States") or {}).items():
        yield name, state
        for nested in (state.get("ItemProcessor"), state.get("Iterator"), *(state.get("Branches") or [])):
            if isinstance(nested, dict):
                yield from _states(nested)


def _of_type(resources: dict[str, Any], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    return ((k, r) for k, r in resources.items() if r.get("Type") == kind)
