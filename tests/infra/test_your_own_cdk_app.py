"""The `ToolPipeline` construct from a separate CDK app: a project `toolpipe init` made, with
`infra/` and `shared/` packages of its own, installed in its own environment, runs its tests
and an agent and synthesizes its stack with your code bundled beside toolpipe's."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_init import _environment, _init, _install, _run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_project_with_its_own_infra_and_shared_packages(tmp_path: Path) -> None:
    python = _environment(tmp_path)
    project = tmp_path / "desk"
    _init(python, project)
    # A CDK project's usual layout: its own `infra` (the stack's pieces) and `shared` (code its
    # agents import). Neither may shadow toolpipe's, nor be shadowed.
    (project / "shared").mkdir()
    (project / "shared" / "__init__.py").write_text('SIGN_OFF = "(from the desk)"\n')
    (project / "infra").mkdir()
    (project / "infra" / "__init__.py").write_text('STACK_NAME = "DeskAgents"\n')
    agents = project / "desk" / "agents.py"
    agents.write_text(
        agents.read_text()
        .replace(
            "from toolpipe import Agent, tool",
            "from shared import SIGN_OFF\nfrom toolpipe import Agent, tool",
        )
        .replace('return f"{city}: {forecast}"', 'return f"{city}: {forecast} {SIGN_OFF}"')
    )
    tests = project / "tests" / "test_agents.py"
    tests.write_text(
        tests.read_text().replace('"Paris: sunny, 21 °C"', '"Paris: sunny, 21 °C (from the desk)"')
    )
    app = project / "cdk_app.py"
    app.write_text(
        app.read_text()
        .replace(
            "from toolpipe.cdk import synth", "from infra import STACK_NAME\nfrom toolpipe.cdk import synth"
        )
        .replace(
            'synth("Desk", agents="desk.agents")',
            'synth(STACK_NAME, agents="desk.agents", packages=["shared"])',
        )
    )
    assert "STACK_NAME" in app.read_text() and "packages" in app.read_text()
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('packages = ["desk"]', 'packages = ["desk", "shared", "infra"]')
    )
    _install(python, project)

    tests_run = _run(python, project, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert tests_run.returncode == 0, tests_run.stdout + tests_run.stderr
    ran = _run(python, project, "-m", "toolpipe", "run", "What is the weather in Paris?")
    assert ran.returncode == 0, ran.stdout + ran.stderr

    # Its CDK app reads the same context as toolpipe's stack: a bad value is one line.
    bad = _run(python, project, "cdk_app.py", TOOLPIPE_BUNDLE="0", CDK_CONTEXT_JSON='{"api_auth": "bogus"}')
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("toolpipe: "), bad.stderr
    assert "Traceback" not in bad.stderr
    # Its CDK app, by the CDK CLI from the project's folder as `make synth` runs it (cdk.json's
    # `python cdk_app.py`, the project's python first on PATH; offline: no layers built).
    out = tmp_path / "cdk.out"
    path = os.pathsep.join([str(python.parent), str(ROOT / "node_modules" / ".bin"), os.environ["PATH"]])
    synth = subprocess.run(
        ["cdk", "synth", "--quiet", "--output", str(out)],
        cwd=project,
        env={**os.environ, "TOOLPIPE_BUNDLE": "0", "CDK_DISABLE_VERSION_CHECK": "1", "PATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert synth.returncode == 0, synth.stdout + synth.stderr
    template = json.loads((out / "DeskAgents.template.json").read_text())
    # The same stack as toolpipe's own: its outputs, which the docs' deploy path reads.
    assert {"ApiUrl", "ModelApiKeySecretArn", "EventBusName"} <= set(template["Outputs"])
    # It creates in a new account: the API Gateway CloudWatch role its stage's logs need is made
    # and set (`AWS::ApiGateway::Account`), kept when the stack is deleted, before the stage.
    resources = template["Resources"]
    [(account_id, account)] = [
        (n, r) for n, r in resources.items() if r["Type"] == "AWS::ApiGateway::Account"
    ]
    role_id = account["Properties"]["CloudWatchRoleArn"]["Fn::GetAtt"][0]
    assert "AmazonAPIGatewayPushToCloudWatchLogs" in str(
        resources[role_id]["Properties"]["ManagedPolicyArns"]
    )
    assert account["DeletionPolicy"] == resources[role_id]["DeletionPolicy"] == "Retain"
    [stage] = [r for r in resources.values() if r["Type"] == "AWS::ApiGateway::Stage"]
    assert account_id in stage["DependsOn"] and "AccessLogSetting" in stage["Properties"]
    functions = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler", "").startswith("toolpipe.")
    ]
    assert len(functions) == 5  # orchestrator, tool worker, tool runner, api, triggers
    assert {f["Properties"]["Environment"]["Variables"]["TOOLPIPE_APP"] for f in functions} == {"desk.agents"}
    assets = {f["Properties"]["Code"]["S3Key"] for f in functions}
    assert len(assets) == 1  # one code asset for every function
    [asset] = [
        p for p in out.iterdir() if p.is_dir() and p.name == f"asset.{next(iter(assets)).split('.')[0]}"
    ]
    staged = {str(p.relative_to(asset)) for p in asset.rglob("*.py")}
    # The project's packages and toolpipe's, side by side; toolpipe's CDK app and emulator left out.
    assert {"desk/agents.py", "shared/__init__.py", "toolpipe/__init__.py"} <= staged
    assert "toolpipe/shared/agents/app.py" in staged and "toolpipe/functions/api/handler.py" in staged
    assert not any(p.startswith(("infra/", "toolpipe/infra/")) for p in staged)
