"""What the other contracts share: text that can be stored, a timestamp, a usage count."""

from datetime import UTC, datetime
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
)

# Whether time a run spends waiting for a person or a program (an approval, a question, a
# client-executed call's result) counts toward its `max_duration` (shared/runs/time_limit.py).
MaxDurationWaits = Literal["count", "exclude"]


def text_safe(text: str) -> str:
    """Lone surrogates (text cut mid-character, `\\ud800` escapes) cannot be stored as UTF-8:
    each becomes `?`, so one odd character never fails a write."""
    return text.encode("utf-8", "replace").decode("utf-8")


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0
    # Integer micro-dollars: DynamoDB counters are exact for integers (floats need Decimal).
    cost_micro_usd: int = 0
    tool_calls: int = 0  # calls the model asked for

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(**{name: getattr(self, name) + getattr(other, name) for name in Usage.model_fields})
