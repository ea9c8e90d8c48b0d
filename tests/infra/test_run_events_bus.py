"""The run events bus on the synthesized template: the stack's own, and each function may put
on it the run events it publishes, no other event, and nothing anywhere else."""

import json
from typing import Any

from toolpipe.infra.cdk.functions import FUNCTIONS
from toolpipe.shared.runs.events import DETAIL_TYPES

# Every function that publishes: not the tool runner (tool code publishes nothing).
HANDLERS = {spec.handler for spec in FUNCTIONS.values() if spec.publishes}


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


def test_each_function_may_put_on_that_bus_only_the_run_events_it_publishes(template: Any) -> None:
    [bus] = template.find_resources("AWS::Events::EventBus")
    functions = template.find_resources("AWS::Lambda::Function")
    role_of = {
        f["Properties"]["Role"]["Fn::GetAtt"][0]: f["Properties"]["Handler"] for f in functions.values()
    }
    granted: dict[str, list[str]] = {}
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if not any(a in ("events:PutEvents", "events:*", "*") for a in actions):
                continue
            assert statement["Resource"] == {"Fn::GetAtt": [bus, "Arn"]}, json.dumps(statement)
            condition = statement["Condition"]
            assert condition["Null"] == {"events:source": "false", "events:detail-type": "false"}
            [(operator, keys)] = [(k, v) for k, v in condition.items() if k != "Null"]
            assert operator == "ForAllValues:StringEquals" and keys["events:source"] == ["toolpipe"]
            for role in policy["Properties"]["Roles"]:
                granted.setdefault(role_of[role["Ref"]], []).extend(keys["events:detail-type"])
    # The tool runner publishes nothing: it holds no PutEvents at all.
    assert granted == {spec.handler: sorted(spec.publishes) for spec in FUNCTIONS.values() if spec.publishes}
    # No function may ask for a run (RunRequested), nor the worker (agent tools) ask for approval.
    published = {t for spec in FUNCTIONS.values() for t in spec.publishes}
    assert published == {model.__name__ for model in DETAIL_TYPES}
    assert "ApprovalRequested" in FUNCTIONS["orchestrator"].publishes
    assert not {"ApprovalRequested", "ToolCallRequested", "RunRequested"} & set(
        FUNCTIONS["tool_worker"].publishes
    )
