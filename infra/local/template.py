"""The synthesized template the local runtime is built from: what `cdk deploy` ships.

Synthesizing takes 7-60 s here (the CDK runs in node), far over `toolpipe serve`'s 2 s to be
ready, so the template is synthesized once and kept as a file: toolpipe's own stack with its
default settings, `infra/local/stack.template.json`, written by `make local-template` and held
equal to a fresh synthesis by `tests/infra/test_local_template.py` (a change to the stack that
is not written there fails the tests). A project whose CDK app adds to the stack (a grant for a
tool, say) names its own synthesized template with `[tool.toolpipe] template` in its
pyproject.toml, or `TOOLPIPE_TEMPLATE`.

The file is the template less what only says where code is: asset keys and hashes, CDK metadata,
the bootstrap parameter. The local runtime creates each resource it emulates from its properties
(`infra/local/runtime.py`), gives each function the environment the template gives it, and
checks each AWS call a function makes against its role's policies (`infra/local/iam.py`).
"""

import json
import os
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolpipe.infra.cdk.functions import FUNCTIONS, RUNNER_ENV, TOOL_RUNNER, FunctionSpec, runner_spec
from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.project import find_project

if TYPE_CHECKING:
    from toolpipe.infra.cdk.aws_limits import Breach

PACKAGED = Path(__file__).with_name("stack.template.json")
TEMPLATE_ENV = "TOOLPIPE_TEMPLATE"
# The app module the packaged template names; the local runtime sets the app it runs instead.
PACKAGED_APP = "assistant.agents"

# The properties that say where code is, different at every build: left out of the file.
_ASSET_PROPERTIES = {"S3Key", "S3Bucket", "S3ObjectVersion"}


def normalize(template: Mapping[str, Any]) -> dict[str, Any]:
    """The template less what changes with every build (asset keys, CDK's metadata)."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: "<asset>" if k in _ASSET_PROPERTIES else clean(v)
                for k, v in value.items()
                if k not in ("Metadata",)
            }
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    resources = {
        name: clean(resource)
        for name, resource in template["Resources"].items()
        if resource["Type"] != "AWS::CDK::Metadata"
    }
    return {"Resources": resources, "Outputs": clean(template.get("Outputs", {}))}


def dumps(template: Mapping[str, Any]) -> str:
    return json.dumps(normalize(template), indent=1, sort_keys=True) + "\n"


@dataclass(frozen=True)
class Template:
    """A synthesized template, read."""

    resources: dict[str, dict[str, Any]]
    outputs: dict[str, Any]
    path: Path

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {name: r for name, r in self.resources.items() if r["Type"] == kind}

    @cached_property
    def aws_breaches(self) -> "list[Breach]":
        """Every value of the template over an AWS limit once deployed. Worked out once per
        template read (`load` reads each file once): every local runtime a process starts checks
        it, a test's process hundreds of times, ~7 ms each."""
        from toolpipe.infra.cdk import aws_limits  # ~0.3 s of imports a command reading runs skips

        return aws_limits.breaches({"Resources": self.resources})

    def one(self, kind: str) -> tuple[str, dict[str, Any]]:
        """The only resource of a type: the local runtime emulates one of each."""
        found = self.of_type(kind)
        if len(found) != 1:
            raise TemplateError(f"{self.path}: expected one {kind}, found {len(found)}")
        return next(iter(found.items()))

    def properties(self, name: str) -> dict[str, Any]:
        props: dict[str, Any] = self.resources[name].get("Properties", {})
        return props

    def function(self, spec: FunctionSpec) -> tuple[str, dict[str, Any]]:
        """The function whose handler is `spec`'s (the tool runners share one: each named
        runner's environment names it, the default runner's names none)."""
        for name, resource in self.of_type("AWS::Lambda::Function").items():
            props = resource["Properties"]
            if props.get("Handler") == spec.handler and _runner_of(props) == spec.runner:
                return name, props
        raise TemplateError(f"{self.path}: no function with handler {spec.handler}")

    def functions(self) -> Iterator[tuple[FunctionSpec, str, dict[str, Any]]]:
        """toolpipe's functions that the template deploys (the triggers function may be off),
        and each named tool runner's."""
        lambdas = [r["Properties"] for r in self.of_type("AWS::Lambda::Function").values()]
        handlers = {props.get("Handler") for props in lambdas}
        runners = sorted(
            runner
            for props in lambdas
            if props.get("Handler") == TOOL_RUNNER.handler and (runner := _runner_of(props)) is not None
        )
        for spec in (*FUNCTIONS.values(), *map(runner_spec, runners)):
            if spec.handler in handlers:
                name, props = self.function(spec)
                yield spec, name, props

    def role_policies(self, role: str) -> list[dict[str, Any]]:
        """The policy documents attached to a role: its own inline policies and every
        `AWS::IAM::Policy` naming it. Managed policies are left out: the functions' one,
        AWSLambdaBasicExecutionRole, allows only CloudWatch Logs, which nothing calls locally."""
        documents = [p["PolicyDocument"] for p in self.properties(role).get("Policies", [])]
        for policy in self.of_type("AWS::IAM::Policy").values():
            if {"Ref": role} in policy["Properties"].get("Roles", []):
                documents.append(policy["Properties"]["PolicyDocument"])
        return documents


def _runner_of(props: Mapping[str, Any]) -> str | None:
    """The named runner a function's environment says it is, if any."""
    runner = props.get("Environment", {}).get("Variables", {}).get(RUNNER_ENV)
    return str(runner) if runner is not None else None


class TemplateError(ConfigurationError):
    """The template is not one the local runtime can run (not toolpipe's stack, or unreadable)."""


def configured_path() -> Path:
    """`TOOLPIPE_TEMPLATE`, else the project's `[tool.toolpipe] template` (relative to its root),
    else the packaged one."""
    given = os.environ.get(TEMPLATE_ENV)
    if given:
        return Path(given)
    project = find_project()
    if project is None or project.settings.get("template") is None:
        return PACKAGED  # the project names none: never one of a project around it
    return project.root / str(project.settings["template"])


@cache
def load(path: Path = PACKAGED) -> Template:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TemplateError(f"cannot read the stack template {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("Resources"), dict):
        raise TemplateError(f"{path} is not a CloudFormation template (no Resources)")
    return Template(resources=data["Resources"], outputs=data.get("Outputs", {}), path=path)


def generate(path: Path = PACKAGED) -> None:
    """Synthesize toolpipe's own stack (default settings, no layers built) into `path`."""
    import tempfile

    from toolpipe.infra.cdk.app import build_app

    with tempfile.TemporaryDirectory() as out:
        app, stack = build_app(bundle=False, outdir=out, agents=PACKAGED_APP)
        template = app.synth().get_stack_by_name(stack.stack_name).template
    path.write_text(dumps(template))


def project_template_path(project: Path) -> Path:
    """Where a project keeps its synthesized template: `[tool.toolpipe] template`."""
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    return project / str(pyproject["tool"]["toolpipe"]["template"])


def synthesize_project(project: Path) -> dict[str, Any]:
    """A project's own CDK app (its `cdk.json` app and context) synthesized, no layers built."""
    import subprocess
    import sys
    import tempfile

    cdk = json.loads((project / "cdk.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as out:
        env = {
            **os.environ,
            "TOOLPIPE_BUNDLE": "0",
            "CDK_OUTDIR": out,
            "CDK_CONTEXT_JSON": json.dumps(cdk.get("context", {})),
        }
        command = str(cdk["app"]).replace("python ", f"{sys.executable} ", 1)
        subprocess.run(command, shell=True, cwd=project, env=env, check=True)
        (synthesized,) = Path(out).glob("*.template.json")
        template: dict[str, Any] = json.loads(synthesized.read_text())
    return template


def generate_project(project: Path) -> Path:
    """Write a project's synthesized template where its pyproject.toml says; the path."""
    target = project_template_path(project)
    target.write_text(dumps(synthesize_project(project)))
    return target


if __name__ == "__main__":
    # `python -m toolpipe.infra.local.template [PROJECT_DIR ...]` (`make local-template`).
    import sys

    if len(sys.argv) == 1:
        generate()
        print(f"wrote {PACKAGED}")
    for folder in sys.argv[1:]:
        print(f"wrote {generate_project(Path(folder))}")
