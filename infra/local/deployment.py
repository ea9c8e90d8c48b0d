"""The synthesized template deployed into moto: the resources, as the template defines them.

Each resource the local runtime emulates is created from its template properties (the table's
keys and indexes, each queue's visibility, retention and redrive, the buckets, the bus, the
state machine's definition with its substitutions, each function's handler, timeout and memory,
the input bucket's notification), under a local name, and every `Ref`/`Fn::GetAtt` to it resolves
to that name or ARN. From the same template each function gets its environment and its role's
policies (`function_context`). What the local runtime adds or replaces, and why, is `LOCAL_ADDITIONS`.

Not emulated: the REST API (the local server maps HTTP to the API function itself), log groups,
layers, the CDK's notification handler function, and the EventBridge rules' Lambda targets,
which moto cannot invoke (the runtime applies the rules itself, `infra/local/triggers.py` and
`runtime.py`).
"""

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolpipe.infra.cdk.functions import FunctionSpec
from toolpipe.infra.cdk.intrinsics import Resolver
from toolpipe.infra.local import account, iam
from toolpipe.infra.local.isolation import FunctionContext
from toolpipe.infra.local.template import Template, TemplateError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_sqs.client import SQSClient

REGION = iam.REGION
ACCOUNT = iam.ACCOUNT
PREFIX = "toolpipe-local"

# The environment variables the local runtime sets beyond the template's, per function ("*":
# every function): the Lambda service's own, and what stands in locally for what AWS provides.
LOCAL_ADDITIONS: dict[str, tuple[str, ...]] = {
    # What Lambda sets in every function's environment.
    "*": (
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
        "AWS_LAMBDA_FUNCTION_TIMEOUT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        # No X-Ray daemon locally; logs at the developer's level.
        "POWERTOOLS_TRACE_DISABLED",
        "POWERTOOLS_LOG_LEVEL",
        # The app module, where the project is: the one the developer runs, not the template's.
        "TOOLPIPE_APP_PATH",
    ),
    # The model endpoint the developer set (or the scripted one), and the local server's URL
    # for approval links.
    "orchestrator": ("OPENAI_BASE_URL", "OPENAI_API_KEY", "TOOLPIPE_MODEL", "TOOLPIPE_LINK_BASE_URL"),
    # Runs a file or an event starts are the local user's, so `toolpipe show` reads them (a
    # deployed stack sets it from `-c trigger_principal`).
    "triggers": ("TOOLPIPE_TRIGGER_PRINCIPAL",),
    # The header the local server reads the caller from, for the OpenAPI document the API serves.
    "api": ("TOOLPIPE_LOCAL_CALLER_HEADER",),
}
# Local settings a function reads live from the process when the process sets them ("*": every
# function): the CLI sets the model's URL and the server's link base after the runtime started,
# and `toolpipe serve` allows runs to name MCP servers.
PASSTHROUGH: dict[str, tuple[str, ...]] = {
    "*": ("TOOLPIPE_APP", "TOOLPIPE_APP_PATH", "TOOLPIPE_ALLOW_RUN_MCP_SERVERS"),
    "orchestrator": ("OPENAI_BASE_URL", "OPENAI_API_KEY", "TOOLPIPE_MODEL", "TOOLPIPE_LINK_BASE_URL"),
}
# Template variables the local runtime leaves out, per function, and why: the model's key is the
# developer's own `OPENAI_API_KEY` (errors then name it, not a local secret nobody set); the
# deployed orchestrator reads it from the secret this names.
LOCAL_REMOVALS: dict[str, tuple[str, ...]] = {"orchestrator": ("OPENAI_API_KEY_SECRET_ARN",)}


def passthrough(function: str) -> frozenset[str]:
    return frozenset(PASSTHROUGH["*"]) | frozenset(PASSTHROUGH.get(function, ()))


# Names that are the developer's in the process and a function's alone once it runs: the model's
# key and endpoint reach the orchestrator only (through its secret and environment).
PRIVATE = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY_SECRET_ARN")


@dataclass
class Deployment:
    """The template's resources in moto, by what they are to the runtime."""

    template: Template
    refs: dict[str, str] = field(default_factory=dict)
    # The secrets it created, by name (a call may name one so): for the IAM check.
    secret_arns: dict[str, str] = field(default_factory=dict)
    attributes: dict[tuple[str, str], str] = field(default_factory=dict)
    # Local physical names and ARNs the runtime uses directly.
    table: str = ""
    bucket: str = ""
    queue_url: str = ""
    queue_arn: str = ""
    dlq_url: str = ""
    state_machine_arn: str = ""
    definition: str = ""
    bus_name: str = ""
    bus_arn: str = ""
    signing_key_arn: str = ""
    model_key_arn: str | None = None
    trigger_bucket: str | None = None
    trigger_prefix: str | None = None
    # The tool queue's event source's MaximumConcurrency: the local worker pool runs no more.
    worker_max_concurrency: int | None = None
    function_arns: dict[str, str] = field(default_factory=dict)
    role_arns: dict[str, str] = field(default_factory=dict)
    # The event patterns of the template's rules, and of those enabled (the runtime applies
    # them itself).
    rules: list[dict[str, Any]] = field(default_factory=list)
    enabled_rules: list[dict[str, Any]] = field(default_factory=list)

    def rule_enabled(self, pattern: dict[str, Any]) -> bool:
        return pattern in self.enabled_rules

    def rule_for(self, detail_type: str) -> dict[str, Any] | None:
        """The pattern of the template's rule for `detail_type` events, if it has one."""
        return next((p for p in self.rules if detail_type in p.get("detail-type", [])), None)

    def resolver(self) -> Resolver:
        return Resolver(self.refs, self.attributes, region=REGION, account=ACCOUNT)

    def resolve(self, value: Any) -> Any:
        return self.resolver().resolve(value)

    def function_context(
        self, spec: FunctionSpec, local: dict[str, str], owned: frozenset[str]
    ) -> FunctionContext:
        """`spec`'s function as the template deploys it: its environment (plus the `local`
        additions `LOCAL_ADDITIONS` names for it) and its role's policies."""
        _, props = self.template.function(spec)
        environment = {
            key: str(value)
            for key, value in self.resolve(props.get("Environment", {}).get("Variables", {})).items()
        }
        allowed = set(LOCAL_ADDITIONS["*"]) | set(LOCAL_ADDITIONS.get(spec.name, ()))
        unexpected = set(local) - allowed
        if unexpected:
            raise TemplateError(f"local additions not declared for {spec.name}: {sorted(unexpected)}")
        environment.update(local)
        for name in LOCAL_REMOVALS.get(spec.name, ()):
            environment.pop(name, None)
        policy = self.role_policy(props["Role"]["Fn::GetAtt"][0])
        return FunctionContext(
            name=spec.name,
            environment=environment,
            policy=policy,
            owned=owned,
            timeout_seconds=int(props.get("Timeout", 3)),
            memory_mb=int(props.get("MemorySize", 128)),
        )

    def state_machine_context(self) -> FunctionContext:
        """The state machine's role: what its tasks may call (invoke, send to the queue)."""
        _, machine = self.template.one("AWS::StepFunctions::StateMachine")
        policy = self.role_policy(machine["Properties"]["RoleArn"]["Fn::GetAtt"][0])
        return FunctionContext(name="state-machine", environment={}, policy=policy)

    def role_policy(self, role: str) -> iam.Policy:
        """A role of the template (by logical id) with its policies, resolved to local ARNs."""
        return iam.Policy(
            role_arn=self.role_arns[role],
            documents=tuple(self.resolve(self.template.role_policies(role))),
            state_machine_arn=self.state_machine_arn,
            secret_arns=self.secret_arns,
        )

    def owned_names(self) -> frozenset[str]:
        """Every name some function's environment sets here: each function answers these alone."""
        names: set[str] = set(PRIVATE)
        for _, _, props in self.template.functions():
            names.update(props.get("Environment", {}).get("Variables", {}))
        for additions in (*LOCAL_ADDITIONS.values(), *PASSTHROUGH.values()):
            names.update(additions)
        return frozenset(names)


def _local_name(logical_id: str) -> str:
    return f"{PREFIX}-{logical_id}"


Functions = dict[str, tuple[str, dict[str, Any]]]  # spec name -> (logical id, properties)


def deploy(
    template: Template,
    *,
    dynamodb: "DynamoDBClient",
    s3: "S3Client",
    sqs: "SQSClient",
    iam_client: Any,
    lambdas: Any,
    sfn: Any,
    events: Any,
    secrets: Any,
    names: dict[str, str],
    secret_values: dict[str, str],
) -> Deployment:
    """Create the template's resources in moto. `names`: local names for some logical ids
    (by role: "table", "bucket", ...); `secret_values`: values for secrets by role (a secret
    with none is created empty, as CloudFormation creates one without `GenerateSecretString`)."""
    # Before anything is created: what a new AWS account, and AWS's limits, refuse.
    account.check(template)
    _refuse_what_aws_refuses(template)
    d = Deployment(template)
    functions = {spec.name: (name, props) for spec, name, props in template.functions()}
    _create_roles(d, template, iam_client)
    _create_tables(d, template, dynamodb, names, functions)
    _create_buckets(d, template, s3, names, functions)
    _create_queues(d, template, sqs, names)
    _create_bus(d, template, events, names)
    _create_secrets(d, template, secrets, names, secret_values, functions)
    _name_what_is_not_emulated(d, template)
    _create_functions(d, functions, lambdas, names)
    _create_state_machine(d, template, sfn, names)
    _read_rules_and_triggers(d, template)
    return d


def _refuse_what_aws_refuses(template: Template) -> None:
    """A template CloudFormation would fail to create (a value over an AWS limit once resolved)
    does not start locally either: the local runtime is what deploys."""
    found = template.aws_breaches
    if found:
        raise TemplateError(f"{template.path}: AWS would refuse this stack: {found[0].line()}")


def _env_ref(functions: Functions, function: str, variable: str) -> str | None:
    """The logical id a function's environment variable refers to, if it is a `Ref`."""
    if function not in functions:
        return None
    value = functions[function][1].get("Environment", {}).get("Variables", {}).get(variable)
    return value["Ref"] if isinstance(value, dict) and "Ref" in value else None


def _create_roles(d: Deployment, template: Template, iam_client: Any) -> None:
    # Roles: the ARNs error messages name; policies are evaluated in-process (iam.py).
    for logical_id in template.of_type("AWS::IAM::Role"):
        arn = iam_client.create_role(
            RoleName=_local_name(logical_id)[:64], AssumeRolePolicyDocument=json.dumps({"Statement": []})
        )["Role"]["Arn"]
        d.refs[logical_id], d.attributes[(logical_id, "Arn")] = _local_name(logical_id)[:64], arn
        d.role_arns[logical_id] = arn


def history_table_id(template: Template) -> str:
    """The history table's logical id: the table the functions read as `TABLE_NAME` (the
    stack's other tables, such as the model's rate budgets, are named otherwise)."""
    tables = template.of_type("AWS::DynamoDB::Table")
    named = {
        value["Ref"]
        for _, _, props in template.functions()
        if isinstance(value := props.get("Environment", {}).get("Variables", {}).get("TABLE_NAME"), dict)
        and "Ref" in value
    }
    found = [logical_id for logical_id in tables if logical_id in named]
    if len(found) != 1:
        raise TemplateError(
            f"{template.path}: expected one AWS::DynamoDB::Table named by TABLE_NAME, found {len(found)}"
        )
    return found[0]


def _create_tables(
    d: Deployment, template: Template, dynamodb: "DynamoDBClient", names: dict[str, str], functions: Functions
) -> None:
    history = history_table_id(template)
    for table_id, table in template.of_type("AWS::DynamoDB::Table").items():
        name = names.get("table", _local_name(table_id)) if table_id == history else _local_name(table_id)
        dynamodb.create_table(TableName=name, **table_definition(table["Properties"]))
        ttl = table["Properties"].get("TimeToLiveSpecification")
        if ttl:
            # Declared as deployed (moto keeps the setting, and expires nothing).
            dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
        d.refs[table_id] = name
        d.attributes[(table_id, "Arn")] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
        if table_id == history:
            d.table = name


def _create_buckets(
    d: Deployment, template: Template, s3: "S3Client", names: dict[str, str], functions: Functions
) -> None:
    bucket_roles = {
        _env_ref(functions, "api", "BUCKET_NAME"): "bucket",
        _env_ref(functions, "triggers", "TOOLPIPE_TRIGGER_BUCKET"): "trigger_bucket",
    }
    for logical_id in template.of_type("AWS::S3::Bucket"):
        role = bucket_roles.get(logical_id)
        bucket = names.get(role, _local_name(logical_id).lower()) if role else _local_name(logical_id).lower()
        s3.create_bucket(Bucket=bucket)
        d.refs[logical_id], d.attributes[(logical_id, "Arn")] = bucket, f"arn:aws:s3:::{bucket}"
        if role == "bucket":
            d.bucket = bucket
        elif role == "trigger_bucket":
            d.trigger_bucket = bucket


def _create_queues(d: Deployment, template: Template, sqs: "SQSClient", names: dict[str, str]) -> None:
    # Dead-letter queues first: a redrive policy names its target's ARN.
    queues = template.of_type("AWS::SQS::Queue")
    _, mapping = template.one("AWS::Lambda::EventSourceMapping")
    tool_queue_id = mapping["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]
    tool_dlq_id = queues[tool_queue_id]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
    queue_names = {tool_queue_id: names.get("tool_queue"), tool_dlq_id: names.get("tool_dlq")}
    for logical_id in sorted(queues, key=lambda q: "RedrivePolicy" in queues[q].get("Properties", {})):
        props = queues[logical_id].get("Properties", {})
        url = sqs.create_queue(
            QueueName=queue_names.get(logical_id) or _local_name(logical_id),
            Attributes=queue_attributes(d.resolve(props)),  # type: ignore[arg-type]
        )["QueueUrl"]
        d.refs[logical_id], d.attributes[(logical_id, "Arn")] = url, iam.queue_arn(url)
    d.queue_url, d.queue_arn = d.refs[tool_queue_id], d.attributes[(tool_queue_id, "Arn")]
    maximum = mapping["Properties"].get("ScalingConfig", {}).get("MaximumConcurrency")
    d.worker_max_concurrency = None if maximum is None else int(maximum)
    d.dlq_url = d.refs[tool_dlq_id]


def _create_bus(d: Deployment, template: Template, events: Any, names: dict[str, str]) -> None:
    bus_id, _ = template.one("AWS::Events::EventBus")
    d.bus_name = names.get("bus", _local_name(bus_id))
    d.bus_arn = events.create_event_bus(Name=d.bus_name)["EventBusArn"]
    d.refs[bus_id], d.attributes[(bus_id, "Arn")], d.attributes[(bus_id, "Name")] = (
        d.bus_name,
        d.bus_arn,
        d.bus_name,
    )


def _create_secrets(
    d: Deployment,
    template: Template,
    secrets: Any,
    names: dict[str, str],
    secret_values: dict[str, str],
    functions: Functions,
) -> None:
    secret_roles = {
        _env_ref(functions, "api", "TOOLPIPE_APPROVAL_SIGNING_KEY_SECRET_ARN"): "signing_key",
        _env_ref(functions, "orchestrator", "OPENAI_API_KEY_SECRET_ARN"): "model_key",
    }
    for logical_id in template.of_type("AWS::SecretsManager::Secret"):
        role = secret_roles.get(logical_id) or logical_id
        name = names.get(role, _local_name(logical_id))
        value = {"SecretString": secret_values[role]} if role in secret_values else {}
        arn = secrets.create_secret(Name=name, **value)["ARN"]
        d.secret_arns[name] = arn
        d.refs[logical_id] = arn
        if role == "signing_key":
            d.signing_key_arn = arn
        elif role == "model_key":
            d.model_key_arn = arn


def _name_what_is_not_emulated(d: Deployment, template: Template) -> None:
    # Things the template refers to that are not emulated: names that resolve, never called.
    for logical_id in template.of_type("AWS::ApiGateway::RestApi"):
        d.refs[logical_id] = "local"
    # A function's log group: a role may name it (the tool runner writes its own only).
    for logical_id in template.of_type("AWS::Logs::LogGroup"):
        name = _local_name(logical_id)
        d.refs[logical_id] = name
        d.attributes[(logical_id, "Arn")] = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{name}:*"


def _create_functions(d: Deployment, functions: Functions, lambdas: Any, names: dict[str, str]) -> None:
    # moto runs the ones a service invokes (Step Functions, S3) through lambdas.py.
    for spec_name, (logical_id, props) in functions.items():
        function_name = names.get(f"function:{spec_name}", _local_name(spec_name))
        arn = lambdas.create_function(
            FunctionName=function_name,
            Runtime="python3.11",  # the handler runs in this process, whatever the template's
            Role=d.role_arns[props["Role"]["Fn::GetAtt"][0]],
            Handler=props["Handler"],
            Code={"ZipFile": b"in-process"},  # never unpacked: lambdas.install() runs the handler
            Timeout=int(props.get("Timeout", 3)),
            MemorySize=int(props.get("MemorySize", 128)),
        )["FunctionArn"]
        d.refs[logical_id], d.attributes[(logical_id, "Arn")] = function_name, arn
        d.function_arns[spec_name] = arn


def _create_state_machine(d: Deployment, template: Template, sfn: Any, names: dict[str, str]) -> None:
    machine_id, machine = template.one("AWS::StepFunctions::StateMachine")
    props = machine["Properties"]
    definition = d.resolve(props["DefinitionString"])
    for name, value in d.resolve(props.get("DefinitionSubstitutions", {})).items():
        definition = definition.replace("${" + name + "}", str(value))
    d.definition = definition
    d.state_machine_arn = sfn.create_state_machine(
        name=names.get("state_machine", _local_name(machine_id)),
        definition=definition,
        roleArn=d.resolve(props["RoleArn"]),
        type=props.get("StateMachineType", "STANDARD"),
    )["stateMachineArn"]
    d.refs[machine_id] = d.state_machine_arn
    d.attributes[(machine_id, "Name")] = d.state_machine_arn.rsplit(":", 1)[-1]


def _read_rules_and_triggers(d: Deployment, template: Template) -> None:
    patterned = [
        rule["Properties"]
        for rule in template.of_type("AWS::Events::Rule").values()
        if "EventPattern" in rule["Properties"]
    ]
    d.rules = [d.resolve(props["EventPattern"]) for props in patterned]
    d.enabled_rules = [
        pattern
        for pattern, props in zip(d.rules, patterned, strict=True)
        if props.get("State", "ENABLED") == "ENABLED"
    ]
    for _, notification in template.of_type("Custom::S3BucketNotifications").items():
        for config in notification["Properties"]["NotificationConfiguration"].get(
            "LambdaFunctionConfigurations", []
        ):
            for rule in config.get("Filter", {}).get("Key", {}).get("FilterRules", []):
                if rule["Name"] == "prefix":
                    d.trigger_prefix = rule["Value"]


def table_definition(props: dict[str, Any]) -> dict[str, Any]:
    """`create_table` arguments from an `AWS::DynamoDB::Table`'s properties."""
    keys = (
        "KeySchema",
        "AttributeDefinitions",
        "GlobalSecondaryIndexes",
        "LocalSecondaryIndexes",
        "BillingMode",
    )
    return {key: props[key] for key in keys if key in props}


def queue_attributes(props: dict[str, Any]) -> dict[str, str]:
    """`create_queue` attributes from an `AWS::SQS::Queue`'s (resolved) properties."""
    names = (
        "VisibilityTimeout",
        "MessageRetentionPeriod",
        "DelaySeconds",
        "MaximumMessageSize",
        "ReceiveMessageWaitTimeSeconds",
    )
    attributes = {name: str(props[name]) for name in names if name in props}
    if "RedrivePolicy" in props:
        attributes["RedrivePolicy"] = json.dumps(props["RedrivePolicy"])
    return attributes
