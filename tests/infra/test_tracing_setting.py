"""`-c tracing=false`: the functions deploy without X-Ray, and their code never loads it.

Lambda's tracing mode alone would not stop Powertools' Tracer from loading X-Ray (it reads only
its environment), so the stack sets `POWERTOOLS_TRACE_DISABLED` with it.
"""

from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cdk.app import SKIP_BUNDLING
from toolpipe.shared.tracing import tracing_enabled


def _functions(template: Any) -> dict[str, Any]:
    found = template.find_resources("AWS::Lambda::Function", {"Properties": {"Runtime": "python3.14"}})
    return {name: f["Properties"] for name, f in found.items()}


def _synth(context: dict[str, Any], outdir: Path) -> Any:
    """The Toolpipe stack as `cdk synth -c ...` builds it, cdk-nag included: a finding raises."""
    from aws_cdk import App, Validations
    from aws_cdk.assertions import Template
    from cdk_nag import AwsSolutionsChecks

    from toolpipe.infra.cdk.stack import ToolpipeStack

    app = App(outdir=str(outdir), context=context, post_cli_context=SKIP_BUNDLING)
    ToolpipeStack(app, "Toolpipe")
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return Template.from_json(app.synth().get_stack_by_name("Toolpipe").template)


def _lambda_env(props: dict[str, Any]) -> dict[str, str]:
    # What the function's code sees on Lambda (values that are CloudFormation references don't matter here).
    env = {k: v for k, v in props["Environment"]["Variables"].items() if isinstance(v, str)}
    return {**env, "LAMBDA_TASK_ROOT": "/var/task"}


def test_by_default_every_function_traces(template: Any) -> None:
    functions = _functions(template)
    assert len(functions) == 5  # orchestrator, tool worker, tool runner, API, triggers
    for props in functions.values():
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert tracing_enabled(_lambda_env(props))


@pytest.mark.slow
def test_tracing_false_deploys_no_xray_and_loads_none(tmp_path: Path) -> None:
    functions = _functions(_synth({"tracing": "false"}, tmp_path))
    assert len(functions) == 5
    for props in functions.values():
        assert props.get("TracingConfig", {}).get("Mode") != "Active"
        assert props["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "true"
        assert not tracing_enabled(_lambda_env(props))


def test_a_bad_tracing_value_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^tracing must be true or false, not 'maybe'$"):
        _synth({"tracing": "maybe"}, tmp_path)
