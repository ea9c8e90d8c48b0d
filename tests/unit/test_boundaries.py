"""Settings, contracts and the one-way import rule."""

import ast
import json
from pathlib import Path

import pytest

from infra.definition import SUBSTITUTIONS, build_definition, definition_json, substitute
from shared.errors import ConfigurationError
from shared.messages import HISTORY_ITEM, AssistantMessage, ToolCall
from shared.settings import CallTimeouts, StoreSettings

ROOT = Path(__file__).resolve().parents[2]


def test_shared_never_imports_functions_or_infra() -> None:
    offenders = []
    for path in (ROOT / "shared").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("functions", "infra")]
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
    states = build_definition()["States"]
    dispatch = states["RunTools"]["ItemProcessor"]["States"]["Dispatch"]
    assert set(dispatch["Parameters"]["MessageBody"]) == {
        "run_id.$",
        "call_id.$",
        "seq.$",
        "message_seq.$",
        "task_token.$",
    }
    assert states["CallModel"]["Parameters"]["Payload"] == {
        "action": "step",
        "run_id.$": "$.run_id",
        "results.$": "$.results",
    }
    assert dispatch["TimeoutSecondsPath"] and dispatch["HeartbeatSecondsPath"] and dispatch["Catch"]


def test_substitution_fills_every_placeholder() -> None:
    filled = substitute(definition_json(), {name: f"value-of-{name}" for name in SUBSTITUTIONS})
    assert "${" not in filled
    json.loads(filled)
    with pytest.raises(ValueError, match="missing substitutions"):
        substitute(definition_json(), {})
