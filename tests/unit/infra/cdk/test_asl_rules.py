"""Rules of the States Language that Step Functions applies at create time and asl-validator
4.0 passes (found by an adversarial probe): each breaks our own definition one way."""

from collections.abc import Callable
from typing import Any

import pytest

from toolpipe.infra.cdk.asl_rules import problems
from toolpipe.infra.cdk.definition import build_definition, loop_states


def _call_model(d: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = loop_states(d)["CallModel"]
    return state


def _all_not_last(d: dict[str, Any]) -> None:
    _call_model(d)["Retry"].insert(0, {"ErrorEquals": ["States.ALL"], "MaxAttempts": 1})


def _all_with_another(d: dict[str, Any]) -> None:
    _call_model(d)["Catch"][0]["ErrorEquals"] = ["States.ALL", "Foo"]


def _slow_backoff(d: dict[str, Any]) -> None:
    _call_model(d)["Retry"][0]["BackoffRate"] = 0.5


def _heartbeat_over_timeout(d: dict[str, Any]) -> None:
    _call_model(d).update(TimeoutSeconds=10, HeartbeatSeconds=20)


def _choice_ends(d: dict[str, Any]) -> None:
    loop_states(d)["Route"]["End"] = True


def _nested_next(d: dict[str, Any]) -> None:
    loop_states(d)["Route"]["Choices"][0]["And"][0]["Next"] = "Ended"


@pytest.mark.parametrize(
    ("breaks", "reason"),
    [
        (_all_not_last, "States.ALL must be alone in the last of its Retry"),
        (_all_with_another, "States.ALL must be alone in the last of its Catch"),
        (_slow_backoff, "BackoffRate 0.5 is below 1.0"),
        (_heartbeat_over_timeout, "HeartbeatSeconds 20 must be smaller than TimeoutSeconds 10"),
        (_choice_ends, "a Choice state cannot end the execution"),
        (_nested_next, "a rule inside And, Or or Not cannot name Next"),
    ],
)
def test_a_definition_aws_refuses_names_the_state_and_the_rule(
    breaks: Callable[[dict[str, Any]], None], reason: str
) -> None:
    assert problems(build_definition()) == []
    definition = build_definition()
    breaks(definition)
    (found,) = problems(definition)
    assert reason in found and ("'CallModel'" in found or "'Route'" in found)
