"""The price table and the stack owner's override: bad input is one line naming what is wrong."""

import pytest

from toolpipe.shared.costs.estimate import estimate
from toolpipe.shared.costs.operations import FunctionUse, Operations
from toolpipe.shared.costs.prices import PRICES_ENV, PriceTable, prices_json
from toolpipe.shared.errors import ConfigurationError


def test_an_override_replaces_only_what_it_names() -> None:
    prices = PriceTable.from_env({PRICES_ENV: '{"region": "eu-west-1", "state_transition": 0.00003}'})
    assert prices.region == "eu-west-1"
    assert prices.state_transition == 0.00003
    assert prices.lambda_request == PriceTable().lambda_request


def test_no_override_is_the_default_table() -> None:
    assert PriceTable.from_env({}) == PriceTable() == PriceTable.from_env({PRICES_ENV: ""})


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "TOOLPIPE_PRICES is not JSON"),
        ("[1, 2]", "must be a JSON object of prices, not list"),
        ('{"state_transitions": 1}', "state_transitions: Extra inputs are not permitted"),
        ('{"lambda_request": -1}', "lambda_request: Input should be greater than or equal to 0"),
        ('{"event": "cheap"}', "event: Input should be a valid number"),
        ('{"event": NaN}', "event: Input should be a finite number"),
        ('{"state_transition": Infinity}', "state_transition: Input should be a finite number"),
        ('{"source": "' + "x" * 500 + '"}', "source: String should have at most 200 characters"),
    ],
)
def test_a_bad_override_is_one_line(text: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        PriceTable.from_env({PRICES_ENV: text})
    message = str(caught.value)
    assert says in message
    assert "\n" not in message


def test_the_construct_checks_an_override_before_deploying_it() -> None:
    assert prices_json({"region": "eu-west-1"}) == '{"region": "eu-west-1"}'
    with pytest.raises(ConfigurationError, match="sqs_requests"):
        prices_json({"sqs_requests": 1})


def test_the_estimate_is_counts_times_prices_by_service() -> None:
    ops = Operations(
        state_transitions=45,
        functions={"orchestrator": FunctionUse(requests=10, mb_ms=512 * 1000 * 10)},
        read_units=3.5,
        write_units=10,
        sqs_requests=30,
        s3_tier1_requests=2,
        s3_tier2_requests=4,
        events=7,
        api_requests=1,
    )
    prices = PriceTable()
    report = estimate(ops, prices, model_usd=0.01)
    assert report.by_service["stepfunctions"] == pytest.approx(45 * 0.000025)
    # 10 invocations of 1 s each at 512 MB: 5 GB-s.
    assert report.by_service["lambda"] == pytest.approx(10 * 0.2e-6 + 5 * prices.lambda_gb_second)
    assert report.by_service["dynamodb"] == pytest.approx(3.5 * 0.125e-6 + 10 * 0.625e-6)
    assert report.by_service["s3"] == pytest.approx(2 * 0.005e-3 + 4 * 0.0004e-3)
    assert report.infra_usd == pytest.approx(sum(report.by_service.values()))
    assert report.total_usd == pytest.approx(0.01 + report.infra_usd)
