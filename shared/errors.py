"""The root of every error toolpipe raises on purpose (`ToolpipeError`), and its families. Each
error lives in the package that raises it (`shared/tools/errors.py`, `shared/history/errors.py`,
`shared/runs/errors.py`, `shared/model/errors.py`, `shared/deferred/models.py`...), under one of:

- `ModelVisibleError`: the model should see it as an error tool result; the run goes on.
- `DefinitionError`: a tool or agent is defined wrongly; raised at import, never mid-run.
- `ConfigurationError`: a setting is missing or malformed; raised at start-up.
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


# What every error tool result begins with: the model reads it, and reports strip it.
ERROR_PREFIX = "Error: "


def error_text(message: str) -> str:
    """The text of an error tool result, as the model reads every one."""
    return ERROR_PREFIX + message


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


class NotFoundError(ToolpipeError):
    """Nothing of that id, or nothing the caller may see: the same answer, so ids cannot be
    probed (a request's 404, mapped once in `functions/api/errors.py`)."""


class ConflictError(ToolpipeError):
    """What the request would change is not in a state that allows it (decided, ended, still
    running): nothing changed (a request's 409)."""


class ConfigurationError(ToolpipeError):
    """A required setting is missing or malformed; raised at start-up, not at first use."""
