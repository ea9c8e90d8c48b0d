"""Builds each entry point's service from settings, once per cold start.

Each builder imports its own service's module: a function imports this factory, and must not
pay at its cold start for the other functions' services (the tool worker for the model step,
the API for the tool executor).
"""

from typing import TYPE_CHECKING

from botocore.config import Config

from toolpipe.shared.aws_clients import AwsClients
from toolpipe.shared.costs.meter import watch
from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.history import DynamoHistoryStore
from toolpipe.shared.model.api_key import NO_KEY, ApiKeySource, SecretApiKey, StaticApiKey
from toolpipe.shared.runs.events import CLIENT_CONFIG, NO_EVENTS, EventPublisher
from toolpipe.shared.runs.ports import StepFunctionsStarter, StepFunctionsStopper, StepFunctionsTaskReporter
from toolpipe.shared.settings import (
    ApprovalLinkSettings,
    CallTimeouts,
    EventSettings,
    ModelSettings,
    QuotaSettings,
    RateSettings,
    StateMachineSettings,
    StoreSettings,
    ToolRunnerSettings,
    TriggerSettings,
    WorkerSettings,
)
from toolpipe.shared.telemetry import run_spans

# The openai client's endpoint when OPENAI_BASE_URL is unset: the key of its rate budget.
OPENAI_BASE_URL = "https://api.openai.com/v1"
# SigV4 for the links S3 clients presign: S3 refuses SigV2 on buckets made since 2020.
PRESIGN_CONFIG = Config(signature_version="s3v4")
# GetExecutionHistory is throttled per account: a burst of endings waits its turn here, in
# adaptive retries, rather than failing the invocation into the execution-ended DLQ.
HISTORY_READ_CONFIG = Config(retries={"mode": "adaptive", "max_attempts": 8})

if TYPE_CHECKING:
    from toolpipe.shared.costs.transitions import TransitionCounter
    from toolpipe.shared.runs.active_time import ActiveTime
    from toolpipe.shared.runs.cancel import RunCanceller
    from toolpipe.shared.runs.deferred import DeferredCalls
    from toolpipe.shared.runs.delete import RunDeleter
    from toolpipe.shared.runs.fork import RunForker
    from toolpipe.shared.runs.model_step import ModelStep
    from toolpipe.shared.runs.resume import RunResumer
    from toolpipe.shared.runs.starter import RunStarter
    from toolpipe.shared.runs.tool_executor import ToolCallExecutor
    from toolpipe.shared.runs.triggers import TriggerService


def build_store(settings: StoreSettings, *, aws: AwsClients) -> DynamoHistoryStore:
    return DynamoHistoryStore(
        aws.table(settings.table_name),
        watch(aws.client("s3")),
        settings.bucket_name,
        settings.inline_content_limit,
        retention_days=settings.retention_days,
    )


def build_events(settings: EventSettings, *, aws: AwsClients) -> EventPublisher:
    """Run events to the bus, and spans to the OTLP endpoint, each when configured."""
    spans = run_spans()
    if not settings.bus_name:
        # No client either: events are off.
        return NO_EVENTS if not spans.enabled else EventPublisher(None, None, spans)
    return EventPublisher(watch(aws.client("events", CLIENT_CONFIG)), settings.bus_name, spans)


def build_api_key(settings: ModelSettings) -> ApiKeySource:
    """Where the orchestrator's model key comes from; nothing is read until a call needs it."""
    if settings.api_key_secret_arn:
        return SecretApiKey(settings.api_key_secret_arn)
    if settings.api_key:
        return StaticApiKey(settings.api_key)
    if settings.base_url:
        # Many self-hosted OpenAI-compatible servers take no key (the stack's
        # `model_key_secret_arn=none`); the client insists on one.
        return StaticApiKey(NO_KEY)
    raise ConfigurationError("set OPENAI_API_KEY_SECRET_ARN (deployed) or OPENAI_API_KEY (local)")


def build_model_step(
    store: StoreSettings,
    model: ModelSettings,
    timeouts: CallTimeouts,
    events: EventSettings,
    rate: RateSettings | None = None,
    *,
    aws: AwsClients,
) -> "ModelStep":
    # Imported here: only the orchestrator has the openai package.
    from toolpipe.shared.model.openai_client import OpenAIModelClient, build_openai_client
    from toolpipe.shared.runs.catalog import RegisteredAgents
    from toolpipe.shared.runs.model_step import ModelStep
    from toolpipe.shared.runs.rate_governor import RateGovernor
    from toolpipe.shared.runs.triggers import AnswerWriter, S3ObjectStore

    api_key = build_api_key(model)
    governor = None
    if rate is not None and rate.enabled and rate.table_name:
        # The budget is per endpoint: unset, the client's own default, OpenAI's.
        endpoint = model.base_url or OPENAI_BASE_URL
        governor = RateGovernor(
            aws.table(rate.table_name), rate, endpoint, call_heartbeat_seconds=timeouts.heartbeat_seconds
        )
    client = OpenAIModelClient(
        # The key is sent with each request (`api_key`), read when the call is made: a secret
        # still empty at cold start must not fail the build, nor stay cached once it is set.
        build_openai_client(model.base_url, NO_KEY),
        api_key=api_key,
        timeout_seconds=model.timeout_seconds,
        max_retries=model.max_retries,
        governed=governor is not None,
    )
    sfn = aws.client("stepfunctions")
    reporter = StepFunctionsTaskReporter(sfn)
    return ModelStep(
        build_store(store, aws=aws),
        client,
        model.model,
        timeouts,
        reporter,
        lambda arn: StepFunctionsStarter(sfn, arn),
        agents=RegisteredAgents(),
        events=build_events(events, aws=aws),
        answers=AnswerWriter(S3ObjectStore(watch(aws.client("s3")))),
        approvals=build_deferred_calls(store, events, timeouts, aws=aws),
        governor=governor,
        active_time=build_active_time(store, aws=aws),
    )


def build_active_time(store: StoreSettings, *, aws: AwsClients) -> "ActiveTime":
    from toolpipe.shared.deferred.store import DynamoApprovalStore
    from toolpipe.shared.runs.active_time import ActiveTime

    table = aws.table(store.table_name)
    return ActiveTime(table, build_store(store, aws=aws), DynamoApprovalStore(table))


def build_deferred_calls(
    store: StoreSettings,
    events: EventSettings,
    timeouts: CallTimeouts,
    admin_principal: str | None = None,
    links: ApprovalLinkSettings | None = None,
    *,
    aws: AwsClients,
) -> "DeferredCalls":
    from toolpipe.shared.deferred.links import ApprovalLinks, SecretSigningKey
    from toolpipe.shared.deferred.store import DynamoApprovalStore
    from toolpipe.shared.runs.catalog import RegisteredAgents
    from toolpipe.shared.runs.deferred import DeferredCalls

    links = links or ApprovalLinkSettings()
    return DeferredCalls(
        DynamoApprovalStore(aws.table(store.table_name)),
        build_store(store, aws=aws),
        StepFunctionsTaskReporter(aws.client("stepfunctions")),
        admin_principal,
        agents=RegisteredAgents(),
        timeout_seconds=timeouts.approval_timeout_seconds,
        events=build_events(events, aws=aws),
        # The key is read at the first link made or checked, not at cold start; again after
        # its max age (a rotation).
        links=ApprovalLinks(SecretSigningKey(links.signing_key_secret_arn))
        if links.signing_key_secret_arn
        else None,
        api_url=links.api_url,
        link_edits=links.link_edits,
    )


def build_tool_executor(
    store: StoreSettings,
    worker: WorkerSettings,
    machine: StateMachineSettings,
    events: EventSettings,
    runner: ToolRunnerSettings,
    *,
    aws: AwsClients,
) -> "ToolCallExecutor":
    from toolpipe.shared.runs.tool_executor import ToolCallExecutor
    from toolpipe.shared.runs.tool_run import InProcessToolRunner, ToolRunner
    from toolpipe.shared.runs.tool_runner_client import LambdaToolRunner, invoke_config

    sfn = aws.client("stepfunctions")
    tools: ToolRunner = InProcessToolRunner()
    if runner.function_name:
        tools = LambdaToolRunner(
            aws.client("lambda", invoke_config(runner.timeout_seconds)),
            runner.function_name,
            watch(aws.client("s3", PRESIGN_CONFIG)),  # for the input links it presigns
            store.bucket_name,
            runner.timeout_seconds,
            memory_mb=runner.memory_mb,
            runners=runner.runners,
        )
    return ToolCallExecutor(
        build_store(store, aws=aws),
        StepFunctionsTaskReporter(sfn),
        StepFunctionsStarter(sfn, machine.state_machine_arn),  # agent tools start child runs
        worker.heartbeat_every,
        events=build_events(events, aws=aws),
        runner=tools,
    )


def build_run_starter(
    store: StoreSettings,
    machine: StateMachineSettings,
    events: EventSettings,
    quota: QuotaSettings | None = None,
    *,
    aws: AwsClients,
) -> "RunStarter":
    """`quota`: the per-caller quotas starts count against (the API's); None for none."""
    from toolpipe.shared.runs.quota import RunQuota
    from toolpipe.shared.runs.starter import RunStarter

    return RunStarter(
        build_store(store, aws=aws),
        StepFunctionsStarter(aws.client("stepfunctions"), machine.state_machine_arn),
        events=build_events(events, aws=aws),
        quota=None if quota is None else RunQuota(quota),
    )


def build_run_canceller(
    store: StoreSettings,
    machine: StateMachineSettings,
    events: EventSettings,
    admin_principal: str | None,
    *,
    aws: AwsClients,
) -> "RunCanceller":
    from toolpipe.shared.runs.cancel import RunCanceller

    return RunCanceller(
        build_store(store, aws=aws),
        StepFunctionsStopper(aws.client("stepfunctions"), machine.state_machine_arn),
        admin_principal,
        events=build_events(events, aws=aws),
    )


def build_run_resumer(
    store: StoreSettings,
    machine: StateMachineSettings,
    events: EventSettings,
    admin_principal: str | None,
    quota: QuotaSettings | None = None,
    *,
    aws: AwsClients,
) -> "RunResumer":
    """`quota`: the per-caller quotas; a resumed run takes a running slot, as `POST /runs` does."""
    from toolpipe.shared.runs.quota import RunQuota
    from toolpipe.shared.runs.resume import RunResumer

    return RunResumer(
        build_store(store, aws=aws),
        StepFunctionsStarter(aws.client("stepfunctions"), machine.state_machine_arn),
        admin_principal,
        events=build_events(events, aws=aws),
        quota=None if quota is None else RunQuota(quota),
    )


def build_run_forker(
    store: StoreSettings,
    machine: StateMachineSettings,
    events: EventSettings,
    quota: QuotaSettings,
    *,
    aws: AwsClients,
) -> "RunForker":
    """`quota`: the per-caller quotas a fork counts against, as `POST /runs` does."""
    from toolpipe.shared.runs.fork import RunForker
    from toolpipe.shared.runs.quota import RunQuota

    return RunForker(
        build_store(store, aws=aws),
        StepFunctionsStarter(aws.client("stepfunctions"), machine.state_machine_arn),
        events=build_events(events, aws=aws),
        quota=RunQuota(quota),
    )


def build_run_deleter(store: StoreSettings, admin_principal: str | None, *, aws: AwsClients) -> "RunDeleter":
    from toolpipe.shared.runs.delete import RunDeleter

    return RunDeleter(build_store(store, aws=aws), admin_principal)


def build_trigger_service(
    store: StoreSettings,
    machine: StateMachineSettings,
    events: EventSettings,
    triggers: TriggerSettings,
    *,
    aws: AwsClients,
) -> "TriggerService":
    from toolpipe.shared.runs.triggers import S3ObjectStore, TriggerService

    return TriggerService(
        build_run_starter(store, machine, events, aws=aws), S3ObjectStore(watch(aws.client("s3"))), triggers
    )


def build_transition_counter(store: StoreSettings, *, aws: AwsClients) -> "TransitionCounter":
    from toolpipe.shared.costs.transitions import TransitionCounter

    return TransitionCounter(aws.client("stepfunctions", HISTORY_READ_CONFIG), build_store(store, aws=aws))
