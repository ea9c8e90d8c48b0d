"""Errors of calling the model: worth another try later (`ModelCallError`), after a wait the
endpoint asked for (`ModelRateLimitedError`), or not at all (`ModelRejectedError`)."""

from toolpipe.shared.errors import ToolpipeError


class ModelCallError(ToolpipeError):
    """The model endpoint failed after every retry the time budget allowed; worth another try
    later (the state machine retries the step)."""


class ModelResponseError(ModelCallError):
    """The endpoint answered 200 with something that is not a chat completion (HTML, garbled
    JSON, no choices): retried like a 5xx."""


class ModelRateLimitedError(ToolpipeError):
    """The endpoint answered 429, or asked to wait (`Retry-After`), and the client was built to
    leave the wait to the run's rate governor (shared/runs/rate_governor.py) rather than sleep
    through it in the Lambda. `retry_after`: the seconds it asked for, None when it named none."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


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
