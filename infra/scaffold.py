"""`toolpipe init DIR`: a project of your own that uses toolpipe as a library.

It holds an agents module (a tool and an agent), a test that drives the agent with a scripted
model, and a CDK app that deploys it with the `ToolPipeline` construct; it passes its own tests
as created. toolpipe's example project (examples/assistant) is one, with other agents.
"""

import keyword
import re
from pathlib import Path

_AGENTS = '''"""Your agents and their tools. Every `Agent` at this module's top level is registered
under its name: `toolpipe run "..." --agent weather`."""

from toolpipe import Agent, tool

# Stands in for a weather service, so the project runs offline as created.
_FORECASTS = {"paris": "sunny, 21 °C", "oslo": "snow, -3 °C", "lima": "cloudy, 18 °C"}


@tool
def get_weather(city: str) -> str:
    """Get today's weather in a city.

    Args:
        city: The city's name, for example Paris.
    """
    forecast = _FORECASTS.get(city.strip().lower())
    if forecast is None:
        raise ValueError(f"no forecast for '{city}'; known cities: Paris, Oslo, Lima")
    return f"{city}: {forecast}"


weather = Agent(
    name="weather",
    instructions="You answer questions about the weather. Use get_weather; never guess. Answer briefly.",
    tools=[get_weather],
)
'''

_TEST = '''"""The agent, driven offline: a scripted model, the whole pipeline emulated in this process."""

from toolpipe.testing import LocalPipeline, Reply, call


def test_the_agent_asks_the_tool_and_answers() -> None:
    with LocalPipeline() as pipeline:
        pipeline.script(
            Reply(tool_calls=[call("get_weather", city="Paris")]),
            Reply(content="Sunny in Paris, 21 °C."),
        )
        run = pipeline.run("What is the weather in Paris?", agent="weather")
    assert run.status == "succeeded", run.error
    assert run.tool_results == ["Paris: sunny, 21 °C"]
    assert run.output == "Sunny in Paris, 21 °C."


def test_an_unknown_city_is_an_error_the_model_reads() -> None:
    with LocalPipeline() as pipeline:
        pipeline.script(Reply(tool_calls=[call("get_weather", city="Atlantis")]), Reply(content="I do not know."))
        run = pipeline.run("Weather in Atlantis?", agent="weather")
    assert run.status == "succeeded", run.error
    assert "no forecast for 'Atlantis'" in run.tool_results[0]
'''

PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["toolpipe"]

[project.optional-dependencies]
# The local runtime (tests, `toolpipe run`) and the CDK app.
dev = ["toolpipe[local]", "pytest>=8"]

[tool.setuptools]
packages = ["{package}"]

# The module that defines your agents: `toolpipe run`, `toolpipe serve` and the CDK app load it.
[tool.toolpipe]
app = "{package}.agents"

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

CDK_JSON = """{{
  "app": "python cdk_app.py",
  "context": {{
    "model_name": "gpt-4o-mini",
    "model_base_url": ""
  }}
}}
"""

CDK_APP = '''"""Your CDK app: `cdk deploy` from this folder deploys your agents with toolpipe's pipeline.

`TOOLPIPE_BUNDLE=0 cdk synth` writes the template without building the layers (offline).
"""

import os

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from toolpipe.cdk import SKIP_BUNDLING, ToolPipeline

app = cdk.App(post_cli_context=SKIP_BUNDLING if os.environ.get("TOOLPIPE_BUNDLE") == "0" else None)
stack = cdk.Stack(app, "{stack}")
ToolPipeline(
    stack,
    "Agents",
    app="{package}.agents",
    model_name=str(app.node.try_get_context("model_name") or "gpt-4o-mini"),
    model_base_url=str(app.node.try_get_context("model_base_url") or ""),
)
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
'''

GITIGNORE = """.venv/
__pycache__/
*.egg-info/
.toolpipe/
cdk.out/
"""

README = """# {dist}

Agents on toolpipe: `{package}/agents.py` defines them.

    pip install -e '.[dev]'
    pytest                                  # the agent, driven by a scripted model
    toolpipe run "Weather in Paris?"        # a local run (set OPENAI_BASE_URL for a real model)
    cdk deploy                              # on AWS (TOOLPIPE_BUNDLE=0 cdk synth: offline check)
"""


class ScaffoldError(ValueError):
    pass


def package_name(folder: Path) -> str:
    """A Python package name from a folder's name: `my-agents` gives `my_agents`."""
    name = re.sub(r"\W", "_", folder.resolve().name.lower()).strip("_")
    if not name or name[0].isdigit():
        name = f"agents_{name}"
    return name


def _check_package(name: str) -> str:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ScaffoldError(f"'{name}' is not a Python package name (letters, digits and _)")
    if name in {"toolpipe", "shared", "functions", "infra", "tests", "test"}:
        raise ScaffoldError(
            f"'{name}' would clash with a package the project uses: choose another with --package"
        )
    return name


def project_files(package: str, *, with_example: bool = True) -> dict[str, str]:
    """The project's files by relative path; `with_example`: the weather agent and its test."""
    package = _check_package(package)
    dist = package.replace("_", "-")
    stack = "".join(part.capitalize() for part in package.split("_")) or "Agents"
    files = {
        "pyproject.toml": PYPROJECT.format(dist=dist, package=package),
        "cdk.json": CDK_JSON.format(),
        "cdk_app.py": CDK_APP.format(stack=stack, package=package),
        ".gitignore": GITIGNORE,
        "README.md": README.format(dist=dist, package=package),
        f"{package}/__init__.py": f'"""{dist}: agents on toolpipe."""\n',
    }
    if with_example:
        files[f"{package}/agents.py"] = _AGENTS
        files["tests/test_agents.py"] = _TEST
    return files


def init_project(folder: Path, package: str | None = None) -> list[Path]:
    """Write a new project into `folder` (created if missing); never overwrites a file."""
    files = project_files(package or package_name(folder))
    clashes = [name for name in files if (folder / name).exists()]
    if clashes:
        raise ScaffoldError(f"{folder}: {', '.join(sorted(clashes))} already exist; nothing written")
    written = []
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
