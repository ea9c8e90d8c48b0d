"""`ToolPipeline`: the whole of toolpipe as one construct, for a CDK app of your own.

    from aws_cdk import App, Stack
    from toolpipe.infra.cdk.pipeline import ToolPipeline

    app = App()
    stack = Stack(app, "MyService")
    agents = ToolPipeline(stack, "Agents", api_auth="api_key")
    app.synth()

`infra.cdk.stack.ToolpipeStack` is a stack holding exactly one of these.
"""

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct
from pydantic import ValidationError

from toolpipe.infra.cdk import functions as specs
from toolpipe.infra.cdk.constructs import (
    Api,
    ApiAuth,
    Functions,
    RunEvents,
    RunFlow,
    Storage,
    Throttle,
    ToolQueue,
)
from toolpipe.infra.cdk.constructs.alarms import Alarms
from toolpipe.infra.cdk.constructs.approval_emails import ApprovalEmails, parse_addresses
from toolpipe.infra.cdk.constructs.functions import WORKER_MAX_CONCURRENCY, ReservedConcurrency
from toolpipe.infra.cdk.constructs.model_key import NO_MODEL_KEY, ModelKeySecret, resolve_model_key
from toolpipe.infra.cdk.constructs.otel import OtelExport
from toolpipe.infra.cdk.constructs.triggers import TriggerOptions, Triggers
from toolpipe.shared.app_ref import find_app
from toolpipe.shared.history.retention import DEFAULT_RETENTION_DAYS
from toolpipe.shared.settings import MAX_RUNNING_QUOTA, QuotaSettings, RateSettings
from toolpipe.shared.tools.runners import runner_name_problem

__all__ = ["NO_MODEL_KEY", "ToolPipeline"]


class ToolPipeline(Construct):
    """Storage, the tool queue, the three functions, the run flow, the run-events bus and the
    runs API, wired.

    Constructs that plug into a pipeline (triggers, ...) take what they need from its
    attributes: `table`, `bucket`, `queue`, `state_machine`, `run_events.bus`, `rest_api`,
    `functions` (`.orchestrator`, `.tool_worker`, `.api`, and `.code`, `.dependencies`,
    `.environment` to build a function of their own the same way). `tool_runner(name)` is the
    function a runner's tools run in, to grant them what they need.
    """

    # The component ids, in build order. `ToolpipeStack` leaves them (and the pipeline's own)
    # out of its logical ids, so its resources keep the ids they had before these constructs.
    COMPONENTS = ("Storage", "ToolQueue", "Functions", "RunFlow", "Api")

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_name: str = "gpt-4o-mini",
        model_base_url: str = "",
        model_key_secret: ModelKeySecret = None,
        model_key_kms_key_arn: str | None = None,
        api_auth: ApiAuth | str = ApiAuth.IAM,
        api_throttle: Throttle | None = None,
        api_gateway_cloudwatch_role: bool = True,
        admin_principal: str | None = None,
        mcp_header_secrets: Sequence[str] = (),
        triggers: TriggerOptions | None = None,
        approval_emails: Sequence[str] = (),
        link_edits: bool = False,
        app: str | None = None,
        packages: Sequence[str] = (),
        requirements: Sequence[str] = (),
        requirements_lock: str | os.PathLike[str] | None = None,
        tracing: bool = True,
        otel: OtelExport | None = None,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        quota_starts_per_minute: int | None = 60,
        quota_running: int | None = 20,
        model_rate_per_minute: float = 0,
        model_rate_burst: int = 1,
        model_rate_max_wait: int = 3600,
        reserved_concurrency: ReservedConcurrency | None = None,
        worker_max_concurrency: int | None = WORKER_MAX_CONCURRENCY,
        alarms: bool = True,
        alarm_topic: str | sns.ITopic | None = None,
        prices: Mapping[str, Any] | None = None,
        runners: Sequence[str] = (),
    ) -> None:
        """`model_name`, `model_base_url`: the OpenAI-compatible endpoint the orchestrator calls.
        `model_key_secret`: where its API key is: None (the default) creates the empty
        `ModelApiKey` secret, to put the key in after deploying; the complete ARN of a secret of
        yours, or an `ISecret`, is read as it is (nothing created); `NO_MODEL_KEY` ("none") for an
        endpoint of your own that takes no key. `model_key_kms_key_arn`: the customer-managed KMS
        key that encrypts the secret given by ARN, if any. `api_auth`: "iam" (SigV4,
        the default) or "api_key" (a key and a usage plan, throttled by `api_throttle`).
        `api_gateway_cloudwatch_role`: create the role API Gateway logs with and make it the
        region's API Gateway account setting (kept when the stack is deleted), which a new
        account lacks and the stage's logs need; False leaves that setting alone and the stage
        without logs (docs/operations/deploy.md "API Gateway's CloudWatch role").
        `admin_principal`: a caller who may read every run. `mcp_header_secrets`: ARNs of the
        secrets agents' MCP servers read their headers from. `triggers`: the S3 and
        RunRequested triggers' settings and schedules (README "Triggers"). `approval_emails`:
        addresses emailed the link of each call that waits for approval, through an SNS topic
        (README "Human approval"); none by default. `link_edits`: whoever holds a call's signed
        approval link may also approve it with edited arguments; off by default, when only an
        authenticated caller (the API, `toolpipe approve --arguments`) may (README "The approval
        link"). `app`: your module
        that defines the agents (default: `[tool.toolpipe] app` of the nearest pyproject.toml);
        its top-level package is bundled with the functions. `packages`: other top-level packages
        of yours that it imports, bundled too. `requirements_lock`: a lock file, with
        hashes, of what your tools import, installed into the functions' dependencies layer
        with toolpipe's lock (README "Dependencies"); `requirements` (ranges, unhashed) is no
        longer taken: the layers install only locked, hashed files. `tracing`: False
        deploys the functions without X-Ray, which they then never import (README "Cold start").
        `otel`: where each run's OpenTelemetry trace goes (an OTLP endpoint or a collector
        layer: `OtelExport`); None (the default): no function traces (README "Observability").
        `retention_days`: how long an ended run's items and objects are kept (README "Retention").
        `prices`: USD prices laid over the default table a run's cost is estimated with (README
        "What a run cost"), e.g. `{"region": "eu-west-1", "state_transition": 0.00003}`.
        `quota_starts_per_minute`, `quota_running`: how many runs each caller of `POST /runs` may
        start a minute and have running at once, answered 429 with `Retry-After` past them; 0 or
        None turns one off (README "Quotas"). `reserved_concurrency`: what the API and the
        orchestrator reserve of the account's Lambda concurrency (none by default: new accounts
        have too little to reserve). `worker_max_concurrency`: the most tool workers running at
        once (2 to 1,000; None: no maximum). `alarms`: CloudWatch alarms on the dead-letter
        queues, failed and timed-out executions and throttled functions (README "Alarms"),
        notifying `alarm_topic`: an SNS topic or its ARN, "create" for one made here, or None.
        `model_rate_per_minute`, `model_rate_burst`, `model_rate_max_wait`: the model's rate
        governor (docs/concepts/runs.md "The model's rate limit"): model calls a minute to the
        endpoint and model, from all runs together, how many may go at once, and the most seconds
        a run may wait in all; a rate of 0 (the default) turns it off.
        `runners`: the names of the tool runners your tools name (`@tool(runner="mail")`), each
        its own function and role beside the default runner (docs/operations/security.md, "A
        runner per trust boundary"); grant a runner's tools what they need with
        `tool_runner(name).add_to_role_policy(...)`."""
        super().__init__(scope, construct_id)
        if model_base_url and not re.fullmatch(r"https?://[^\s/]+\S*", model_base_url):
            raise ValueError(f"model_base_url: {model_base_url!r} is not an http(s) URL")
        if not model_name.strip():
            raise ValueError("model_name is blank")
        if app is None:
            found = find_app()
            if found is None:
                raise ValueError(
                    "ToolPipeline needs your app module: ToolPipeline(..., app='myproject.agents'), "
                    "or [tool.toolpipe] app in your pyproject.toml"
                )
            app = found.module
        auth = ApiAuth.parse(api_auth)
        user_lock = _requirements_lock(requirements, requirements_lock)
        approvers = parse_addresses(approval_emails)
        quotas = _quotas(quota_starts_per_minute, quota_running)
        model_rate = _model_rate(model_rate_per_minute, model_rate_burst, model_rate_max_wait)
        named_runners = _runners(runners)
        if worker_max_concurrency is not None and not 2 <= worker_max_concurrency <= 1000:
            raise ValueError(
                f"worker_max_concurrency must be 2 to 1,000 (SQS event sources' range) or unset, not {worker_max_concurrency}"
            )
        # Checked before anything is built: a bad value is one line, not a half-built tree.
        given_key = resolve_model_key(
            self, model_key_secret, kms_key_arn=model_key_kms_key_arn, model_base_url=model_base_url
        )
        self.storage = Storage(
            self, "Storage", create_model_key=model_key_secret is None, retention_days=retention_days
        )
        # The secret the orchestrator reads its key from; None for an endpoint that takes none.
        self.model_key: secretsmanager.ISecret | None = (
            self.storage.model_key if model_key_secret is None else given_key
        )
        self.tool_queue = ToolQueue(self, "ToolQueue")
        self.functions = Functions(
            self,
            "Functions",
            storage=self.storage,
            tool_queue=self.tool_queue,
            model_name=model_name,
            model_base_url=model_base_url,
            model_key=self.model_key,
            model_key_kms_key_arn=model_key_kms_key_arn,
            admin_principal=admin_principal,
            link_edits=link_edits,
            mcp_header_secrets=mcp_header_secrets,
            app=app,
            packages=packages,
            requirements_lock=user_lock,
            tracing=tracing,
            otel=otel,
            quotas=quotas,
            model_rate=model_rate,
            reserved_concurrency=reserved_concurrency,
            worker_max_concurrency=worker_max_concurrency,
            prices=prices,
            runners=named_runners,
        )
        self.run_flow = RunFlow(
            self, "RunFlow", orchestrator=self.functions.orchestrator, tool_queue=self.tool_queue.queue
        )
        self.functions.allow_runs(self.run_flow.state_machine)
        # Run events (infra/cdk/constructs/events.py): the bus, and what each function publishes to it.
        self.run_events = RunEvents(self, "RunEvents")
        for function, spec in (
            (self.functions.orchestrator, specs.ORCHESTRATOR),
            (self.functions.tool_worker, specs.TOOL_WORKER),
            (self.functions.api, specs.API),
        ):
            self.run_events.grant_publish(function, spec.publishes)
        self.api = Api(
            self,
            "Api",
            handler=self.functions.api,
            auth=auth,
            throttle=api_throttle,
            cloud_watch_role=api_gateway_cloudwatch_role,
        )
        # The orchestrator makes `ApprovalRequested`'s link under the API's URL. Built from the
        # API's id, not `rest_api.url` (its stage): the stage depends on the methods, they on the
        # API function, its role on the state machine and that on the orchestrator (a cycle).
        self.functions.orchestrator.add_environment("TOOLPIPE_LINK_BASE_URL", self.api.base_url)

        # Constructs that plug in (triggers, ...) go here: built after the components above,
        # from the attributes below, each granting the functions what it needs itself.
        self.triggers = Triggers(
            self,
            "Triggers",
            bus=self.run_events.bus,
            table=self.table,
            contents=self.bucket,
            machine=self.state_machine,
            orchestrator=self.functions.orchestrator,
            # The worker presigns the run's own input for `read_input` (its code runs in the
            # runner, whose role reads no input: a link per call, to that run's object only).
            worker=self.functions.tool_worker,
            code=self.functions.code,
            layers=[self.functions.dependencies, *self.functions.telemetry_layers],
            environment=self.functions.environment,
            tracing=self.functions.tracing,
            options=triggers or TriggerOptions(),
            retention_days=retention_days,
        )
        self.run_events.grant_publish(self.triggers.function, specs.TRIGGERS.publishes)
        # It starts runs as `POST /runs` does, listing the agent's MCP tools when asked.
        self.functions.grant_mcp_headers(self.triggers.function)
        # Optional: an email per waiting call, from the ApprovalRequested events on the bus.
        self.approval_emails = (
            ApprovalEmails(
                self, "ApprovalEmails", bus=self.run_events.bus, addresses=approvers, link_edits=link_edits
            )
            if approvers
            else None
        )
        # Last: they watch what every component above made.
        self.alarms = (
            Alarms(
                self,
                "Alarms",
                dead_letter_queues={
                    "ToolDeadLetters": self.tool_queue.dead_letters,
                    "ExecutionEndedDeadLetters": self.run_flow.execution_ended_dead_letters,
                    "TriggerDeadLetters": self.triggers.dead_letters,
                },
                state_machine=self.state_machine,
                functions={
                    "Orchestrator": self.functions.orchestrator,
                    "ToolWorker": self.functions.tool_worker,
                    "ToolRunner": self.functions.tool_runner,
                    **{
                        specs.runner_spec(name).construct_id: function
                        for name, function in self.functions.tool_runners.items()
                    },
                    "Api": self.functions.api,
                    "Triggers": self.triggers.function,
                },
                topic=alarm_topic,
            )
            if alarms
            else None
        )

    def tool_runner(self, name: str | None = None) -> lambda_.Function:
        """The function of the runner `name` (None: the default runner), to grant its tools what
        they need: `pipeline.tool_runner("mail").add_to_role_policy(...)`."""
        if name is None:
            return self.functions.tool_runner
        try:
            return self.functions.tool_runners[name]
        except KeyError:
            raise ValueError(
                f"no runner '{name}' in this pipeline: name it in ToolPipeline(..., runners=[...]) "
                f"(it has {', '.join(repr(n) for n in self.functions.tool_runners) or 'the default runner only'})"
            ) from None

    @property
    def table(self) -> dynamodb.Table:
        return self.storage.table

    @property
    def bucket(self) -> s3.Bucket:
        return self.storage.bucket

    @property
    def queue(self) -> sqs.Queue:
        return self.tool_queue.queue

    @property
    def state_machine(self) -> sfn.StateMachine:
        return self.run_flow.state_machine

    @property
    def rest_api(self) -> apigw.RestApi:
        return self.api.rest_api


def _quotas(starts_per_minute: int | None, running: int | None) -> QuotaSettings:
    """The per-caller quotas as the API reads them (0: off); a bad value is a one-line error."""
    for name, value in (("quota_starts_per_minute", starts_per_minute), ("quota_running", running)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a whole number, 0 or more (0: off), not {value!r}")
    if running is not None and running > MAX_RUNNING_QUOTA:
        raise ValueError(f"quota_running must be at most {MAX_RUNNING_QUOTA:,}, not {running}")
    return QuotaSettings(starts_per_minute=starts_per_minute or 0, running=running or 0)


def _model_rate(per_minute: float, burst: int, max_wait: int) -> RateSettings:
    """The model's rate governor as the orchestrator reads it; a bad value is a one-line error."""
    try:
        return RateSettings(per_minute=per_minute, burst=burst, max_wait_seconds=max_wait)
    except ValidationError as e:
        error = e.errors()[0]
        name = {"per_minute": "model_rate_per_minute", "burst": "model_rate_burst"}.get(
            str(error["loc"][0]), "model_rate_max_wait"
        )
        raise ValueError(f"{name}: {error['msg']}") from None


def _runners(names: Sequence[str]) -> tuple[str, ...]:
    """The named runners, checked before anything is built: each a name a function can take, once."""
    if isinstance(names, str):
        raise ValueError(f"runners is a list of names, not the string {names!r}")
    for name in names:
        problem = runner_name_problem(name)
        if problem is not None:
            raise ValueError(f"runners: {problem}")
    if len(set(names)) != len(names):
        raise ValueError(f"runners: a name is given twice in {list(names)}")
    return tuple(names)


def _requirements_lock(requirements: Sequence[str], lock: str | os.PathLike[str] | None) -> Path | None:
    """Your tools' lock file, checked before anything is built; a one-line error otherwise."""
    if requirements:
        raise ValueError(
            "requirements=[...] is no longer taken: the layers install only locked, hashed files. "
            "Lock yours for Lambda with `uv pip compile requirements.in --generate-hashes "
            "--python-platform aarch64-manylinux2014 --python-version 3.14 --only-binary :all: "
            "-o requirements.lock` and pass requirements_lock='requirements.lock' (README \"Dependencies\")"
        )
    if lock is None:
        return None
    path = Path(lock).resolve()
    if not path.is_file():
        raise ValueError(f"requirements_lock: {lock} is not a file")
    # The layer's asset hash is the lock's own bytes: a file it pulls in (`-r`, `-c`) or an
    # option that changes what pip builds would change the layer and not its hash, and the
    # deployed layer would stay as it was.
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith(
            ("-r", "-c", "--requirement", "--constraint", "--no-binary", "-e", "--editable")
        ):
            raise ValueError(
                f"requirements_lock: {lock}, line {number}: {line.strip()[:60]!r} is not taken; "
                "a lock must pin every package itself, each with its hashes"
            )
    return path
