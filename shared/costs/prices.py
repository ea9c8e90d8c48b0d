"""What each counted operation costs, in USD: on-demand list prices of us-east-1 by default; the
stack owner overrides any of them (another region, a negotiated rate) with the construct's
`prices` prop, which reaches the API as `TOOLPIPE_PRICES` (JSON), read once per cold start.
"""

import json
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolpipe.shared.errors import ConfigurationError, describe_validation_error

PRICES_ENV = "TOOLPIPE_PRICES"


class PriceTable(BaseModel):
    """USD per unit. Defaults: AWS's public price pages for us-east-1 (read 2025; DynamoDB
    on-demand after its November 2024 cut; Lambda on arm64, the stack's architecture), without
    free tiers: aws.amazon.com/step-functions/pricing, /lambda/pricing, /dynamodb/pricing/on-demand,
    /sqs/pricing, /s3/pricing, /eventbridge/pricing, /api-gateway/pricing."""

    # No NaN or infinity: a price JSON accepts them, an estimate must not.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # Shown with every cost: bounded, so an override cannot swell each response.
    region: str = Field("us-east-1", min_length=1, max_length=64)
    source: str = Field("AWS list prices, us-east-1, on-demand, 2025", min_length=1, max_length=200)
    state_transition: float = Field(0.025 / 1_000, ge=0)  # Standard workflows
    lambda_request: float = Field(0.20 / 1_000_000, ge=0)
    lambda_gb_second: float = Field(0.0000133334, ge=0)  # arm64; x86_64 is 0.0000166667
    dynamodb_read_unit: float = Field(0.125 / 1_000_000, ge=0)
    dynamodb_write_unit: float = Field(0.625 / 1_000_000, ge=0)
    sqs_request: float = Field(0.40 / 1_000_000, ge=0)  # standard queue
    s3_tier1_request: float = Field(0.005 / 1_000, ge=0)  # PUT, COPY, POST, LIST
    s3_tier2_request: float = Field(0.0004 / 1_000, ge=0)  # GET and the rest
    event: float = Field(1.00 / 1_000_000, ge=0)  # custom events put on a bus
    api_request: float = Field(3.50 / 1_000_000, ge=0)  # REST API, first 333 million

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "PriceTable":
        """The defaults with `TOOLPIPE_PRICES` laid over them; `ConfigurationError` (one line
        naming the variable and the field) when it is not a JSON object of known prices."""
        env = os.environ if environ is None else environ
        return cls.parse_override(env.get(PRICES_ENV) or "{}")

    @classmethod
    def parse_override(cls, text: str) -> "PriceTable":
        try:
            data: Any = json.loads(text)
        except ValueError as e:
            raise ConfigurationError(f"{PRICES_ENV} is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise ConfigurationError(
                f"{PRICES_ENV} must be a JSON object of prices, not {type(data).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ConfigurationError(f"{PRICES_ENV}: {describe_validation_error(e, 'prices')}") from None


def prices_json(prices: Mapping[str, Any]) -> str:
    """An override as the functions read it, checked first: a bad one fails the synth, in one line."""
    text = json.dumps(dict(prices), sort_keys=True)
    PriceTable.parse_override(text)
    return text
