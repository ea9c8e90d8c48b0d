"""Settings read from the environment once per cold start.

Each entry point declares only what it needs, so a missing variable fails at import time
with a message that names it, not at the first AWS call.
"""

import os
import re
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, Json, ValidationError, ValidationInfo, field_validator

from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.history.retention import DEFAULT_RETENTION_DAYS, MAX_RETENTION_DAYS
from toolpipe.shared.owners import owner_of

# Where run requests (`RunRequested`) come from unless the stack names other sources
# (`trigger_sources`). Not `toolpipe`, the run events' own source (shared/runs/events.py).
RUN_REQUESTED_SOURCE = "toolpipe.requests"


class _EnvSettings(BaseModel):
    model_config = ConfigDict(frozen=True)
    # Field name -> environment variable; fields not listed use their upper-cased name.
    env_names: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Self:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            var = cls.env_names.get(name, name.upper())
            if var in env and env[var] != "":
                values[name] = env[var]
        try:
            return cls(**values)
        except ValidationError as e:
            missing = [
                cls.env_names.get(str(err["loc"][0]), str(err["loc"][0]).upper()) for err in e.errors()
            ]
            raise ConfigurationError(
                f"{cls.__name__}: missing or invalid environment variables: {', '.join(missing)}"
            ) from e


class StoreSettings(_EnvSettings):
    env_names: ClassVar[dict[str, str]] = {"retention_days": "TOOLPIPE_RETENTION_DAYS"}
    table_name: str
    bucket_name: str
    # Contents above this many UTF-8 bytes go to S3; DynamoDB items stop at 400 KB.
    inline_content_limit: int = 100_000
    # How long an ended run is kept (shared/history/retention.py); the stack's `retention_days`.
    retention_days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1, le=MAX_RETENTION_DAYS)


class ModelSettings(_EnvSettings):
    env_names: ClassVar[dict[str, str]] = {
        "base_url": "OPENAI_BASE_URL",
        "api_key": "OPENAI_API_KEY",
        "api_key_secret_arn": "OPENAI_API_KEY_SECRET_ARN",
        "model": "TOOLPIPE_MODEL",
        "timeout_seconds": "TOOLPIPE_MODEL_TIMEOUT",
        "max_retries": "TOOLPIPE_MODEL_MAX_RETRIES",
    }
    base_url: str | None = None
    api_key: str | None = None
    api_key_secret_arn: str | None = None
    model: str = "gpt-4o-mini"
    timeout_seconds: float = 60.0
    max_retries: int = 3


class RateSettings(_EnvSettings):
    """The model's rate governor (shared/runs/rate_governor.py), set by the stack
    (`model_rate_per_minute`, `model_rate_burst`, `model_rate_max_wait`). A rate of 0 or unset:
    no governor, and a 429 is retried inside the orchestrator as any other failure."""

    env_names: ClassVar[dict[str, str]] = {
        "table_name": "TOOLPIPE_MODEL_RATE_TABLE",
        "per_minute": "TOOLPIPE_MODEL_RATE_PER_MINUTE",
        "burst": "TOOLPIPE_MODEL_RATE_BURST",
        "max_wait_seconds": "TOOLPIPE_MODEL_RATE_MAX_WAIT",
    }
    table_name: str | None = None
    # Model calls a minute to each endpoint and model, from all runs together.
    per_minute: float = Field(default=0, ge=0)
    # How many calls may go at once after a quiet spell (GCRA's burst).
    burst: int = Field(default=1, ge=1, le=1000)
    # The most a run may wait for the rate limit in all; past it the run ends `limit`.
    max_wait_seconds: int = Field(default=3600, ge=1)

    @property
    def enabled(self) -> bool:
        return self.per_minute > 0 and bool(self.table_name)


class EventSettings(_EnvSettings):
    """The EventBridge bus run events go to (`shared/runs/events.py`); unset, none are published."""

    env_names: ClassVar[dict[str, str]] = {"bus_name": "EVENT_BUS_NAME"}
    bus_name: str | None = None


class StateMachineSettings(_EnvSettings):
    state_machine_arn: str


class CallTimeouts(_EnvSettings):
    """Per-call limits the state machine reads from each decision (`TimeoutSecondsPath`).

    Heartbeat: a visibility timeout (720 s) plus a margin, so a crashed delivery is redelivered,
    and beats again, before the task gives up. Timeout: every delivery (3 x 720 s) and the last
    one's heartbeat timeout fit inside it. The stack sets both from `infra/cdk/limits.py`; these
    defaults are the same numbers (a test holds them equal).
    """

    env_names: ClassVar[dict[str, str]] = {
        "timeout_seconds": "TOOLPIPE_CALL_TIMEOUT_SECONDS",
        "heartbeat_seconds": "TOOLPIPE_CALL_HEARTBEAT_SECONDS",
        "approval_timeout_seconds": "TOOLPIPE_APPROVAL_TIMEOUT_SECONDS",
    }
    timeout_seconds: int = 3060
    heartbeat_seconds: int = 900
    # How long a call that needs approval waits for a person before it counts as denied (one
    # day). Nothing beats while a person decides, so the wait has no heartbeat; a Standard
    # execution may wait up to a year, but the execution's own timeout (30 days) ends it.
    approval_timeout_seconds: int = Field(default=86_400, ge=1, le=2_592_000)


class ApprovalLinkSettings(_EnvSettings):
    """The signed approval link (README "The approval link"): the Secrets Manager secret whose
    value is its HMAC key (the orchestrator signs, the API verifies; unset: no links), and the
    API's base URL with its stage, which the orchestrator makes `ApprovalRequested`'s link under
    (the API function uses the URL each request came to). `link_edits`: whether whoever holds a
    link may also approve with edited arguments (the stack's `-c link_edits=true`); off, editing
    needs an authenticated approver (the JSON API, `toolpipe approve --arguments`)."""

    env_names: ClassVar[dict[str, str]] = {
        "signing_key_secret_arn": "TOOLPIPE_APPROVAL_SIGNING_KEY_SECRET_ARN",
        # Not TOOLPIPE_API_URL: that names the deployed API to the CLI (`--api`).
        "api_url": "TOOLPIPE_LINK_BASE_URL",
        "link_edits": "TOOLPIPE_LINK_EDITS",
    }
    signing_key_secret_arn: str | None = None
    api_url: str | None = None
    link_edits: bool = False


class WorkerSettings(_EnvSettings):
    env_names: ClassVar[dict[str, str]] = {"heartbeat_every": "TOOLPIPE_HEARTBEAT_EVERY"}
    # Well below the state's heartbeat timeout (900 s), so one lost beat does not fail the call.
    heartbeat_every: float = 60.0


class OverflowSettings(_EnvSettings):
    """The bucket the tool runner puts an answer too long for a Lambda response in."""

    bucket_name: str


class ToolRunnerSettings(_EnvSettings):
    """Where the tool worker sends a call's tool code (shared/runs/tool_runner_client.py): the
    default tool runner function, and the function of each named runner (`@tool(runner=...)`).
    Unset, the worker runs it in its own process (tests only)."""

    env_names: ClassVar[dict[str, str]] = {
        "function_name": "TOOLPIPE_TOOL_RUNNER",
        "runners": "TOOLPIPE_TOOL_RUNNERS",
        "timeout_seconds": "TOOLPIPE_TOOL_RUNNER_TIMEOUT",
        "memory_mb": "TOOLPIPE_TOOL_RUNNER_MEMORY",
    }
    function_name: str | None = None
    # Runner name -> function name, as a JSON object (none: the stack has the default runner only).
    runners: Json[dict[str, str]] = Field(default_factory=dict)
    timeout_seconds: float = 105.0
    # Its memory: what each of its invocations costs a run per millisecond (shared/costs).
    memory_mb: int = Field(default=512, ge=128)


class ApiSettings(_EnvSettings):
    """Who may read every run, besides the principal that started it (the stack's CDK context
    `admin_principal`): an owner as shared/owners.py makes it, so a role's ARN (with its path or
    not) or one of its sessions' names every session of that role."""

    env_names: ClassVar[dict[str, str]] = {
        "admin_principal": "TOOLPIPE_ADMIN_PRINCIPAL",
        "allow_run_mcp_servers": "TOOLPIPE_ALLOW_RUN_MCP_SERVERS",
        "local_caller_header": "TOOLPIPE_LOCAL_CALLER_HEADER",
    }
    admin_principal: str | None = None

    @field_validator("admin_principal")
    @classmethod
    def _admin_owner(cls, value: str | None) -> str | None:
        return None if value is None else owner_of(value)

    # Runs may name MCP servers of their own (`POST /runs {"mcp_servers": [...]}`): off unless
    # set, since workers would then call whatever URL a caller gives (the local CLI sets it).
    allow_run_mcp_servers: bool = False
    # `toolpipe serve` only (the local runtime sets it): the header that names the caller there,
    # which the API's served OpenAPI document then describes. Never set deployed.
    local_caller_header: str | None = None


# The most runs a caller may be allowed at once: the running slots are one DynamoDB item (a set
# of 32-character run ids; items stop at 400 KB), and a repair reads that many run records.
MAX_RUNNING_QUOTA = 1000


class QuotaSettings(_EnvSettings):
    """Per-caller quotas on `POST /runs` (shared/runs/quota.py), set by the stack
    (`quota_starts_per_minute`, `quota_running`). 0 or unset: that quota is off."""

    env_names: ClassVar[dict[str, str]] = {
        "starts_per_minute": "TOOLPIPE_QUOTA_STARTS_PER_MINUTE",
        "running": "TOOLPIPE_QUOTA_RUNNING",
    }
    starts_per_minute: int = Field(default=0, ge=0)
    running: int = Field(default=0, ge=0, le=MAX_RUNNING_QUOTA)


# Of Step Functions' 25,000 events an execution may write: the rest is headroom for events the
# bound in shared/agents/agent.py does not model.
EXECUTION_EVENT_BUDGET = 20_000

# An inline Map runs at most 40 iterations at once, whatever its MaxConcurrency
# (https://docs.aws.amazon.com/step-functions/latest/dg/state-map-inline.html). The gated Map
# runs that many so that branches waiting for a person or a program never hold back the rest of
# the turn: an agent whose calls may wait keeps max_calls_per_turn at or under it.
WAITING_CALLS_PER_TURN = 40


class ExecutionBudget(_EnvSettings):
    """How many history events one execution may write before its run continues in a fresh one
    (`TOOLPIPE_EXECUTION_EVENT_BUDGET`: tests lower it to see continuations)."""

    env_names: ClassVar[dict[str, str]] = {"event_budget": "TOOLPIPE_EXECUTION_EVENT_BUDGET"}
    event_budget: int = Field(default=EXECUTION_EVENT_BUDGET, ge=1, le=25_000)


class TriggerSettings(_EnvSettings):
    """The S3 and EventBridge triggers (functions/triggers), set by the stack from CDK context.

    Objects created under `input_prefix` of `bucket` start a run of `agent`; its ending is
    written under `output_prefix` of the same bucket. The two prefixes may not contain each
    other: an answer written under the input prefix would start a run of its own, forever.
    """

    env_names: ClassVar[dict[str, str]] = {
        "bucket": "TOOLPIPE_TRIGGER_BUCKET",
        "agent": "TOOLPIPE_TRIGGER_AGENT",
        "input_prefix": "TOOLPIPE_TRIGGER_INPUT_PREFIX",
        "output_prefix": "TOOLPIPE_TRIGGER_OUTPUT_PREFIX",
        "max_object_bytes": "TOOLPIPE_TRIGGER_MAX_OBJECT_BYTES",
        "instructions": "TOOLPIPE_TRIGGER_INSTRUCTIONS",
        "principal": "TOOLPIPE_TRIGGER_PRINCIPAL",
        "sources": "TOOLPIPE_TRIGGER_SOURCES",
    }
    bucket: str | None = None  # None: any bucket that notifies the function
    agent: str | None = None  # None: the app's first agent
    input_prefix: str = Field(default="inbox/", min_length=1)
    output_prefix: str = Field(default="answers/", min_length=1)
    # Larger objects start no run: reading them 64 KiB a call would spend the agent's budgets.
    max_object_bytes: int = Field(default=1024 * 1024, ge=1)
    instructions: str = "Read the file and do what it asks; if it asks nothing, summarise it."
    # Who owns triggered runs (ToolContext.caller, and who may read them besides the admin), as
    # an owner (shared/owners.py): None means `trigger:s3` and `trigger:eventbridge`.
    principal: str | None = None
    # The event sources whose `RunRequested` starts a run: the rule's pattern and the handler's
    # check. Comma-separated in the environment.
    sources: tuple[str, ...] = (RUN_REQUESTED_SOURCE,)

    @field_validator("sources", mode="before")
    @classmethod
    def _sources(cls, value: Any) -> Any:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            return items
        sources = tuple(dict.fromkeys(str(item).strip() for item in items if str(item).strip()))
        for source in sources:
            # EventBridge's own rule for a source (PutEventsRequestEntry, Scheduler's target).
            if (
                len(source) > 256
                or not re.fullmatch(r"[/.\-_A-Za-z0-9]+", source)
                or source.startswith("aws.")
            ):
                raise ValueError(
                    f"{source!r} is not an event source: 1 to 256 of A-Z a-z 0-9 . / - _, not aws.…"
                )
        if not sources:
            raise ValueError("name at least one event source")
        return sources

    @field_validator("principal")
    @classmethod
    def _principal_owner(cls, value: str | None) -> str | None:
        return None if value is None else owner_of(value)

    @field_validator("output_prefix")
    @classmethod
    def _apart_from_input(cls, value: str, info: ValidationInfo) -> str:
        given = info.data.get("input_prefix")
        if isinstance(given, str) and (value.startswith(given) or given.startswith(value)):
            raise ValueError("the output prefix may not contain the input prefix or be inside it")
        return value
