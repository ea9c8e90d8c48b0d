"""Three families of errors under one root (see STYLE.md).

- `ModelVisibleError`: the model should see it as an error tool result; the run goes on.
- `RunControlError`: control flow that ends or parks a run cleanly.
- anything else (including `SystemError` subclasses here) fails the invocation so SQS or
  Step Functions retry it.
"""

from pydantic import ValidationError


def describe_validation_error(error: ValidationError, root: str) -> str:
    """`field.sub: message; other: message`, the way a person (or a model) can act on it."""
    return "; ".join(
        f"{'.'.join(str(part) for part in err['loc']) or root}: {err['msg']}" for err in error.errors()
    )


class ToolpipeError(Exception):
    """Root of every error toolpipe raises on purpose."""


class ModelVisibleError(ToolpipeError):
    """An error the model can act on: it becomes an error tool result."""


class UnknownToolError(ModelVisibleError):
    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown tool '{name}'. Call only the tools you were given.")
        self.name = name


class ToolNotAllowedError(ModelVisibleError):
    def __init__(self, name: str) -> None:
        super().__init__(f"Tool '{name}' is not available in this run.")


class InvalidArgumentsError(ModelVisibleError):
    """The model's arguments were not JSON or did not match the tool's schema."""


class TooManyCallsError(ModelVisibleError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"Not run: at most {limit} tool calls are run per reply. Ask again for the rest.")


class ToolTimeoutError(ModelVisibleError):
    def __init__(self, name: str, seconds: float) -> None:
        super().__init__(f"Tool '{name}' timed out after {seconds:g} s.")


class ToolExecutionError(ModelVisibleError):
    """The tool itself raised."""


class RunControlError(ToolpipeError):
    """Ends or parks a run cleanly."""


class ConfigurationError(ToolpipeError):
    """A required setting is missing or malformed; raised at start-up, not at first use."""


class RunNotFoundError(ToolpipeError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} not found")
        self.run_id = run_id


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


class CallInProgressError(ToolpipeError):
    """Another delivery of the same tool call holds the claim; retry later (SQS redelivers)."""
