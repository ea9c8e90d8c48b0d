"""Counted operations x prices: what a run's infrastructure cost, by service, beside its model."""

from pydantic import BaseModel, ConfigDict

from toolpipe.shared.costs.operations import Operations
from toolpipe.shared.costs.prices import PriceTable

# Dollar figures are rounded here: far below any price, far above float noise.
_DIGITS = 10


class PriceSource(BaseModel):
    region: str
    source: str


class CostReport(BaseModel):
    """A run's cost as `GET /runs/{id}` and `toolpipe show` report it."""

    model_config = ConfigDict(frozen=True)

    model_usd: float
    infra_usd: float
    total_usd: float
    by_service: dict[str, float]
    operations: Operations
    prices: PriceSource
    # What the figures cover: this run alone (a child run has its own record and its own cost).
    scope: str = "run"


def by_service(ops: Operations, prices: PriceTable) -> dict[str, float]:
    """USD by AWS service, every service listed (zero included): a table reads the same each time."""
    lambda_usd = sum(
        use.requests * prices.lambda_request + use.gb_seconds * prices.lambda_gb_second
        for use in ops.functions.values()
    )
    figures = {
        "stepfunctions": ops.state_transitions * prices.state_transition,
        "lambda": lambda_usd,
        "dynamodb": ops.read_units * prices.dynamodb_read_unit + ops.write_units * prices.dynamodb_write_unit,
        "sqs": ops.sqs_requests * prices.sqs_request,
        "s3": ops.s3_tier1_requests * prices.s3_tier1_request
        + ops.s3_tier2_requests * prices.s3_tier2_request,
        "events": ops.events * prices.event,
        "apigateway": ops.api_requests * prices.api_request,
    }
    return {name: round(usd, _DIGITS) for name, usd in figures.items()}


def estimate(ops: Operations, prices: PriceTable, model_usd: float) -> CostReport:
    services = by_service(ops, prices)
    infra = round(sum(services.values()), _DIGITS)
    return CostReport(
        model_usd=round(model_usd, _DIGITS),
        infra_usd=infra,
        total_usd=round(model_usd + infra, _DIGITS),
        by_service=services,
        operations=ops,
        prices=PriceSource(region=prices.region, source=prices.source),
    )
