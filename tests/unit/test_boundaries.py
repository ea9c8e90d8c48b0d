"""Settings, contracts and the one-way import rule."""

import ast
import json
from pathlib import Path

import pytest

from toolpipe.infra.cdk.definition import (
    SUBSTITUTIONS,
    build_definition,
    definition_json,
    loop_states,
    substitute,
)
from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.messages import HISTORY_ITEM, AssistantMessage, ToolCall
from toolpipe.shared.settings import CallTimeouts, StoreSettings

ROOT = Path(__file__).resolve().parents[2]


def test_shared_never_imports_functions_or_infra() -> None:
    offenders = []
    for path in (ROOT / "shared").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n.removeprefix("toolpipe.").split(".")[0] in ("functions", "infra")
            ]
    assert offenders == []


def test_missing_settings_fail_with_the_variable_names() -> None:
    with pytest.raises(ConfigurationError, match="TABLE_NAME, BUCKET_NAME"):
        StoreSettings.from_env({})
    assert StoreSettings.from_env({"TABLE_NAME": "t", "BUCKET_NAME": "b"}).table_name == "t"
    assert CallTimeouts.from_env({"TOOLPIPE_CALL_TIMEOUT_SECONDS": "5"}).timeout_seconds == 5


def test_history_items_round_trip_through_one_adapter() -> None:
    item = AssistantMessage(seq=2, turn=1, tool_calls=[ToolCall(id="c", name="sum", arguments='{"a": 1}')])
    assert HISTORY_ITEM.validate_json(HISTORY_ITEM.dump_json(item)) == item


def test_only_ids_travel_through_the_state_machine() -> None:
    states = loop_states(build_definition())
    dispatch = states["RunTools"]["ItemProcessor"]["States"]["Dispatch"]
    assert set(dispatch["Parameters"]["MessageBody"]) == {
        "run_id.$",
        "seq.$",
        "message_seq.$",
        "task_token.$",
    }
    assert states["CallModel"]["Parameters"]["Payload"] == {
        "action": "step",
        "run_id.$": "$.run_id",
        "results.$": "$.results",
        "state_machine_arn.$": "$$.StateMachine.Id",
        "execution.$": "$$.Execution.Name",
    }
    assert dispatch["TimeoutSecondsPath"] and dispatch["HeartbeatSecondsPath"] and dispatch["Catch"]


def test_substitution_fills_every_placeholder() -> None:
    filled = substitute(definition_json(), {name: f"value-of-{name}" for name in SUBSTITUTIONS})
    assert "${" not in filled
    json.loads(filled)
    with pytest.raises(ValueError, match="missing substitutions"):
        substitute(definition_json(), {})


@pytest.mark.parametrize(
    ("module", "loads_openai"),
    [
        ("toolpipe.functions.orchestrator.handler", True),
        ("toolpipe.functions.tool_worker.handler", False),
        ("toolpipe.functions.api.handler", False),
        ("toolpipe.functions.triggers.handler", False),
    ],
)
def test_only_the_orchestrator_imports_openai(module: str, loads_openai: bool) -> None:
    """Deployed, only the orchestrator has the openai layer: anything else would fail to start."""
    import subprocess
    import sys

    code = (
        f"import sys, {module}, shared.runs.factory as f; f.build_tool_executor; "
        "print('openai' in sys.modules)"
    )
    env = {
        "TABLE_NAME": "t",
        "BUCKET_NAME": "b",
        "STATE_MACHINE_ARN": "arn",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PATH": "",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    # The orchestrator's module imports the adapter lazily, at its first model step.
    assert out.stdout.strip() == "False"
    if loads_openai:
        build = f"import sys, {module} as h; h.service(); print('openai' in sys.modules)"
        env["OPENAI_API_KEY"] = "k"
        out = subprocess.run(
            [sys.executable, "-c", build], env=env, cwd=ROOT, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "True"


def test_the_api_function_loads_the_openapi_models_only_to_answer_for_the_document() -> None:
    """Powertools' OpenAPI models cost the API function ~40 ms of each cold start (its import,
    318 -> 272 ms of CPU here): only `GET /openapi.json` needs them."""
    import subprocess
    import sys

    models = "aws_lambda_powertools.event_handler.openapi.models"
    code = (
        "import sys, toolpipe.functions.api.handler as h; "
        f"before = {models!r} in sys.modules; h.openapi_document(); print(before, {models!r} in sys.modules)"
    )
    env = {
        "TABLE_NAME": "t",
        "BUCKET_NAME": "b",
        "STATE_MACHINE_ARN": "arn",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]
