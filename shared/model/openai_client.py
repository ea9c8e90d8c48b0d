"""Chat Completions with tools through the `openai` client, against any compatible endpoint.

Retries are ours, not the client's (it is built with `max_retries=0`), because they must
fit the Lambda's remaining time: each attempt's timeout and each wait (the server's
`Retry-After` when it sends one) are cut to the deadline, and a retry that cannot finish
in time is not started.
"""

import email.utils
import random
import time
from collections.abc import Callable
from typing import Any

import openai
from openai import OpenAI

from shared.errors import ModelCallError, ModelRejectedError
from shared.messages import ToolCall
from shared.model.port import ModelReply

# Time kept back for writing the reply to DynamoDB and returning to Step Functions.
RESERVE_SECONDS = 5.0
MIN_ATTEMPT_SECONDS = 2.0
_RETRYABLE_STATUS = {408, 409, 429}


def _retry_after(e: openai.APIStatusError) -> float | None:
    headers = e.response.headers
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time())


class OpenAIModelClient:
    def __init__(
        self,
        client: OpenAI,
        *,
        timeout_seconds: float = 60.0,
        max_retries: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._timeout = timeout_seconds
        self._max_retries = max_retries
        self._sleep = sleep
        self._clock = clock

    def complete(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], deadline: float
    ) -> ModelReply:
        attempt = 0
        while True:
            budget = deadline - self._clock() - RESERVE_SECONDS
            if budget < MIN_ATTEMPT_SECONDS:
                raise ModelCallError(f"no time left for a model call ({budget:.1f} s after reserve)")
            try:
                return self._once(model, messages, tools, timeout=min(self._timeout, budget))
            except (openai.APIConnectionError, openai.APIStatusError) as e:
                status = getattr(e, "status_code", None)
                retryable = status is None or status in _RETRYABLE_STATUS or status >= 500
                if not retryable:
                    body = getattr(e, "body", None)
                    detail = body.get("message", e.message) if isinstance(body, dict) else e.message
                    raise ModelRejectedError(f"model endpoint refused the request: {status} {detail}") from e
                if attempt >= self._max_retries:
                    raise ModelCallError(f"model endpoint failed after {attempt + 1} attempts: {e}") from e
                wait = _retry_after(e) if isinstance(e, openai.APIStatusError) else None
                if wait is None:
                    wait = min(8.0, 0.5 * 2**attempt) * (0.75 + random.random() / 2)
                if self._clock() + wait + MIN_ATTEMPT_SECONDS + RESERVE_SECONDS > deadline:
                    raise ModelCallError(
                        f"model endpoint asked to wait {wait:.1f} s, past the invocation's deadline"
                    ) from e
                self._sleep(wait)
                attempt += 1

    def _once(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], timeout: float
    ) -> ModelReply:
        kwargs: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
            kwargs["parallel_tool_calls"] = True
        response = self._client.with_options(timeout=timeout).chat.completions.create(**kwargs)
        if not response.choices:
            raise ModelCallError("model endpoint answered with no choices")
        message = response.choices[0].message
        calls = [
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
            for c in (message.tool_calls or [])
            if c.type == "function"
        ]
        usage = response.usage
        return ModelReply(
            content=message.content,
            tool_calls=calls,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
        )


def build_openai_client(base_url: str | None, api_key: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
