"""`infra/cdk/functions.py` is the one place handlers and timeouts are named: each must exist."""

import ast
import importlib.util
from pathlib import Path

import pytest

from toolpipe.infra.cdk.functions import FUNCTIONS, FunctionSpec


@pytest.mark.parametrize("spec", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_each_handler_is_a_function_of_its_module(spec: FunctionSpec) -> None:
    # Read, not imported: the handler modules read their settings from the environment at import.
    found = importlib.util.find_spec(spec.module)
    assert found is not None and found.origin is not None, spec.module
    tree = ast.parse(Path(found.origin).read_text())
    assert spec.function in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
