"""Errors the model sees as a tool result (`ModelVisibleError`): the call was wrong, or the tool
failed. The run goes on; the model reads the message and acts on it."""

from toolpipe.shared.errors import ErrorKind, ModelVisibleError


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
