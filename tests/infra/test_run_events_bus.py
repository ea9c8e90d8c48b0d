"""The run events bus on the synthesized template: the stack's own, and only the functions
that publish may put events on it, and only on it."""

import json
from typing import Any

from toolpipe.infra.functions import FUNCTIONS, TOOL_RUNNER

# Every function but the tool runner: tool code publishes nothing.
HANDLERS = {spec.handler for spec in FUNCTIONS.values() if spec != TOOL_RUNNER}


def test_the_stack_has_its_own_bus_and_names_it_in_an_output(template: Any) -> None:
    buses = template.find_resources("AWS::Events::EventBus")
    assert len(buses) == 1
    [(bus, _)] = buses.items()
    assert template.to_json()["Outputs"]["EventBusName"]["Value"] == {"Ref": bus}


def test_each_publishing_function_knows_the_bus(template: Any) -> None:
    [bus] = template.find_resources("AWS::Events::EventBus")
    functions = template.find_resources("AWS::Lambda::Function")
    told = {
        props["Properties"]["Handler"]
        for props in functions.values()
        if props["Properties"].get("Environment", {}).get("Variables", {}).get("EVENT_BUS_NAME")
        == {"Ref": bus}
    }
    assert told == HANDLERS


def test_put_events_is_granted_on_that_bus_only_to_the_publishing_functions(template: Any) -> None:
    [bus] = template.find_resources("AWS::Events::EventBus")
    functions = template.find_resources("AWS::Lambda::Function")
    role_of = {
        f["Properties"]["Role"]["Fn::GetAtt"][0]: f["Properties"]["Handler"] for f in functions.values()
    }
    granted: set[str] = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if not any(a in ("events:PutEvents", "events:*", "*") for a in actions):
                continue
            assert statement["Resource"] == {"Fn::GetAtt": [bus, "Arn"]}, json.dumps(statement)
            granted |= {role_of[role["Ref"]] for role in policy["Properties"]["Roles"]}
    assert granted == HANDLERS
