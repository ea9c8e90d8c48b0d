"""Where the model endpoint's API key comes from, read when a call needs it, not at cold start.

Deployed, the key is a Secrets Manager secret the stack either creates empty or is given
(`cdk deploy -c model_key_secret_arn=...`). An empty secret (no value yet) is the stack's
placeholder: every model call fails with the command that sets it, and once it is set the next
call reads it; nothing needs redeploying or a cold start. A 401 re-reads the key once, so a key
rotated by `put-secret-value` is picked up at once instead of after the cache's max age.

This module imports neither `openai` nor boto3 at import time: the model port stays SDK-free.
"""

from typing import Protocol

from toolpipe.shared.model.errors import ModelKeyNotSetError

# How long a read key is trusted before Secrets Manager is asked again (Powertools' cache).
KEY_MAX_AGE_SECONDS = 300
# What a self-hosted endpoint that checks no key gets: the openai client insists on one.
NO_KEY = "unused"


class ApiKeySource(Protocol):
    """The model API key, as the model client asks for it before each attempt."""

    def get(self) -> str:
        """The key, from a cache when fresh.

        Raises:
            ModelKeyNotSetError: the key has no value yet.
        """
        ...

    def refresh(self) -> str:
        """The key read again now (after a 401: it may have been replaced since it was cached)."""
        ...

    def describe(self) -> str:
        """Where the key comes from, for an error message (never the key itself); "" when the
        user set it in this process's environment and knows where it is."""
        ...


class StaticApiKey:
    """A key given in the environment (`OPENAI_API_KEY`), or none for an endpoint that takes none."""

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def refresh(self) -> str:
        return self._value

    def describe(self) -> str:
        return ""


class SecretApiKey:
    """The key in a Secrets Manager secret, read through Powertools' cached `get_secret`."""

    def __init__(self, secret_arn: str, *, max_age_seconds: int = KEY_MAX_AGE_SECONDS) -> None:
        self.secret_arn = secret_arn
        self._max_age = max_age_seconds

    def get(self) -> str:
        return self._read(force=False)

    def refresh(self) -> str:
        return self._read(force=True)

    def describe(self) -> str:
        return f"secret {self.secret_arn}"

    def _read(self, *, force: bool) -> str:
        # Imported here: building the service (and failing a run) must not need boto3 first.
        from aws_lambda_powertools.utilities import parameters
        from botocore.exceptions import ClientError

        try:
            value = parameters.get_secret(self.secret_arn, max_age=self._max_age, force_fetch=force)
        except parameters.exceptions.GetParameterError as e:
            # Powertools wraps every error in GetParameterError without `from`; the service's
            # error is its context. ResourceNotFoundException on a secret that exists means it
            # has no AWSCURRENT value: the empty secret the stack creates. (Failed reads are not
            # cached, so the next run asks again.)
            cause = e.__context__
            if (
                isinstance(cause, ClientError)
                and cause.response["Error"]["Code"] == "ResourceNotFoundException"
            ):
                raise ModelKeyNotSetError(self.secret_arn) from e
            raise
        key = value.decode() if isinstance(value, bytes) else str(value)
        if not key.strip():
            raise ModelKeyNotSetError(self.secret_arn)
        return key.strip()
