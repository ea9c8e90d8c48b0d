"""Three families of errors under one root (see STYLE.md).

- `ModelVisibleError`: the model should see it as an error tool result; the run goes on.
- `DefinitionError`: a tool or agent is defined wrongly; raised at import, never mid-run.
- the rest fail the invocation so SQS or Step Functions retry it (or, for a request, become
  a 4xx). Control flow (a limit reached, an answer given) is not an exception: the model
  step returns it as its decision.
"""

from enum import StrEnum

from pydantic import ValidationError


def describe_exception(error: BaseException) -> str:
    """`Type: message`, even for an exception whose `str()` raises (a hostile tool's)."""
    try:
        text = str(error)
    except BaseException:  # a hostile `__str__` may raise anything, SystemExit included
        text = "(its message could not be read)"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def describe_validation_error(error: ValidationError, root: str) -> str:
    """`field.sub: message; other: message`, the way a person (or a model) can act on it."""
    return "; ".join(
        f"{'.'.join(str(part) for part in err['loc']) or root}: {err['msg']}" for err in error.errors()
    )


class ErrorKind(StrEnum):
    """Why a tool result is an error: what policies, limits and reports match on.

    The values are the names stored in history items, so they never change.
    """

    UNKNOWN_TOOL = "UnknownToolError"
    TOOL_NOT_ALLOWED = "ToolNotAllowedError"
    INVALID_ARGUMENTS = "InvalidArgumentsError"
    TOO_MANY_CALLS = "TooManyCallsError"
    TOOL_TIMEOUT = "ToolTimeoutError"
    TOOL_FAILED = "ToolExecutionError"
    BLOCKED = "BlockedByHook"
    # The call's task ended without a result: the worker crashed, timed out or went silent.
    NOT_COMPLETED = "NotCompleted"
    # A delivery found the call started and never finished: it may or may not have had its effect.
    IN_DOUBT = "InDoubt"
    CHILD_RUN_ENDED = "ChildRunEnded"
    UNKNOWN_AGENT = "UnknownAgentError"
    # The call came after its run was cancelled: it was not run.
    RUN_CANCELLED = "RunCancelled"
    AGENT_DEPTH = "AgentDepthError"
    # The agent behind an agent tool has calls that may wait for a person or a program: its
    # child run would wait past the parent call's heartbeat and answer an orphan. Never started.
    AGENT_WAITS = "AgentWaitsError"
    # The call needed a person's approval: denied (with the reason), expired undecided, or run
    # with arguments other than those approved (refused by the worker). Never run.
    APPROVAL_DENIED = "ApprovalDenied"
    APPROVAL_EXPIRED = "ApprovalExpired"
    NOT_APPROVED = "NotApproved"
    # An approved call whose tool changed (name, description or parameters) while it waited for
    # the approval: a person approved it for the old tool. Never run.
    TOOL_CHANGED = "ToolChanged"
    # A deferred call (a person's answer, the caller's program's result) got none in time.
    NO_ANSWER = "NoAnswer"
    # The caller's program posted an error for a client-executed call.
    CLIENT_ERROR = "ClientError"
    # A transfer to another agent that was not made: the reply had already transferred the run.
    HANDOFF_REFUSED = "HandoffRefused"

    @property
    def is_invalid_call(self) -> bool:
        """The model's call itself was wrong: a turn with one is a repair turn."""
        return self in (ErrorKind.UNKNOWN_TOOL, ErrorKind.INVALID_ARGUMENTS, ErrorKind.TOOL_NOT_ALLOWED)


class ToolpipeError(Exception):
    """Root of every error toolpipe raises on purpose."""


class DefinitionError(ToolpipeError, ValueError):
    """A tool or an agent is defined wrongly; raised when it is defined, never at run time."""


class ModelVisibleError(ToolpipeError):
    """An error the model can act on: it becomes an error tool result."""

    kind: ErrorKind = ErrorKind.TOOL_FAILED


class UnknownToolError(ModelVisibleError):
    kind = ErrorKind.UNKNOWN_TOOL

    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown tool '{name}'. Call only the tools you were given.")
        self.name = name


class ToolNotAllowedError(ModelVisibleError):
    kind = ErrorKind.TOOL_NOT_ALLOWED

    def __init__(self, name: str) -> None:
        super().__init__(f"Tool '{name}' is not available in this run.")


class InvalidArgumentsError(ModelVisibleError):
    """The model's arguments were not JSON or did not match the tool's schema."""

    kind = ErrorKind.INVALID_ARGUMENTS


class TooManyCallsError(ModelVisibleError):
    kind = ErrorKind.TOO_MANY_CALLS

    def __init__(self, limit: int) -> None:
        super().__init__(f"Not run: at most {limit} tool calls are run per reply. Ask again for the rest.")


class ToolTimeoutError(ModelVisibleError):
    kind = ErrorKind.TOOL_TIMEOUT

    def __init__(
        self,
        name: str,
        seconds: float,
        idempotent: bool = True,
        attempts: int = 1,
        worker_limit: bool = False,
    ) -> None:
        # A thread cannot be stopped: a tool that is not idempotent may still have its effect.
        tail = "" if idempotent else " It may still take effect: check before calling it again."
        limit = " (the time its worker had left)" if worker_limit else ""
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        # Tenths: the time a worker had left is read off a clock, and 1.49 s says nothing 1.5 s does not.
        shown = f"{round(seconds, 1):g}" if seconds >= 0.1 else f"{seconds:.2g}"
        super().__init__(f"Tool '{name}' timed out after {shown} s{limit}{tries}.{tail}")


class ToolExecutionError(ModelVisibleError):
    """The tool itself raised."""

    kind = ErrorKind.TOOL_FAILED


class ConfigurationError(ToolpipeError):
    """A required setting is missing or malformed; raised at start-up, not at first use."""


class UntestedMotoError(ConfigurationError):
    """The installed moto is not a version the local runtime's patches of it were checked with
    (infra/local/patches): refused at start-up rather than misbehaving mid-run."""

    def __init__(self, installed: str, tested: tuple[str, ...]) -> None:
        super().__init__(
            f"moto {installed} is installed, but the local runtime is tested with moto "
            f"{' or '.join(tested)} only: `pip install 'moto=={tested[-1]}'`"
        )
        self.installed = installed
        self.tested = tested


class RunNotFoundError(ToolpipeError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} not found")
        self.run_id = run_id


class IdempotencyConflictError(ToolpipeError):
    """An idempotency key already started a run with a different request."""

    def __init__(self, key: str, run_id: str) -> None:
        super().__init__(f"idempotency key {key!r} already started run {run_id} with a different request")
        self.key = key
        self.run_id = run_id


class QuotaExceededError(ToolpipeError):
    """The caller is over one of its quotas on starting runs (shared/runs/quota.py): a 429,
    to try again after `retry_after` seconds. Nothing was written."""

    def __init__(self, quota: str, limit: int, retry_after: int) -> None:
        what = {"starts_per_minute": "runs started a minute", "running": "runs running at once"}
        super().__init__(
            f"quota exceeded: at most {limit} {what.get(quota, quota)} per caller; "
            f"try again in {retry_after} s"
        )
        self.quota = quota
        self.limit = limit
        self.retry_after = retry_after


class RunEndedError(ToolpipeError):
    """The run already ended, so it cannot be cancelled (a 409)."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id} already ended ({status}): only a running run can be cancelled")
        self.run_id = run_id
        self.status = status


class RunStillRunningError(ToolpipeError):
    """The run (or one of its child runs) is still running, so it cannot be deleted (a 409)."""

    def __init__(self, run_id: str, running: str) -> None:
        which = "it is" if running == run_id else f"its child run {running} is"
        super().__init__(f"run {run_id} cannot be deleted: {which} still running; cancel it first")
        self.run_id = run_id
        self.running = running


class InvalidCursorError(ToolpipeError):
    """A pagination token that this listing did not give (forged, altered, or another caller's)."""

    def __init__(self) -> None:
        super().__init__("next: not a token this listing gave (pass `next` from the previous page as is)")


class UnknownAgentError(ToolpipeError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown agent '{name}' (known: {', '.join(sorted(known))})")
        self.name = name


class UnknownToolsRequestedError(ToolpipeError):
    """A run request's tool allow-list names tools the agent does not have."""

    def __init__(self, agent: str, names: list[str]) -> None:
        super().__init__(f"agent '{agent}' has no tools named {', '.join(repr(n) for n in names)}")


class ModelCallError(ToolpipeError):
    """The model endpoint failed after every retry the time budget allowed; worth another try
    later (the state machine retries the step)."""


class ModelResponseError(ModelCallError):
    """The endpoint answered 200 with something that is not a chat completion (HTML, garbled
    JSON, no choices): retried like a 5xx."""


class ModelRejectedError(ToolpipeError):
    """The endpoint refused the request (bad key, unknown model, invalid tools): retrying the
    same request cannot help, so the run fails at once."""


class ModelKeyNotSetError(ModelRejectedError):
    """The model API key's secret has no value yet (the stack creates it empty). Not retried:
    no retry can set it. The message is the command that does, with the secret's real ARN."""

    def __init__(self, secret_arn: str) -> None:
        super().__init__(
            "the model API key is not set: put it with `aws secretsmanager put-secret-value "
            f"--secret-id {secret_arn} --secret-string YOUR_KEY`"
        )
        self.secret_arn = secret_arn


class CallInProgressError(ToolpipeError):
    """Another delivery of the same tool call holds the claim; retry later (SQS redelivers)."""
