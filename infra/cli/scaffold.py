"""`toolpipe init DIR`: a project of your own that uses toolpipe as a library.

It holds an agents module (a tool and an agent), a test that drives the agent with a scripted
model, and a CDK app that deploys it with the `ToolPipeline` construct; it passes its own tests
as created. toolpipe's example project (examples/assistant) is one, with other agents.
"""

import importlib.util
import json
import keyword
import re
import sys
from pathlib import Path

from toolpipe.infra.cdk.feature_flags import FEATURE_FLAGS

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

APP = "{package}.agents"  # the module that defines the agents, whatever folder pytest runs from


def test_the_agent_asks_the_tool_and_answers() -> None:
    with LocalPipeline(app=APP) as pipeline:
        pipeline.script(
            Reply(tool_calls=[call("get_weather", city="Paris")]),
            Reply(content="Sunny in Paris, 21 °C."),
        )
        run = pipeline.run("What is the weather in Paris?", agent="weather")
    assert run.status == "succeeded", run.error
    assert run.tool_results == ["Paris: sunny, 21 °C"]
    assert run.output == "Sunny in Paris, 21 °C."


def test_an_unknown_city_is_an_error_the_model_reads() -> None:
    with LocalPipeline(app=APP) as pipeline:
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
{dependencies}

[tool.setuptools]
packages = ["{package}"]

# The module that defines your agents: `toolpipe run`, `toolpipe serve` and the CDK app load it.
[tool.toolpipe]
app = "{package}.agents"

[tool.pytest.ini_options]
testpaths = ["tests"]
"""


def cdk_json() -> str:
    """The project's cdk.json: its CDK app, and the CDK feature flags toolpipe's apps are built
    with (infra/cdk/feature_flags.py; `build_app` applies them too), as `cdk init` would write them."""
    context = {"model_name": "gpt-4o-mini", "model_base_url": "", **FEATURE_FLAGS}
    return json.dumps({"app": "python cdk_app.py", "context": context}, indent=2) + "\n"


CDK_APP = '''"""Your CDK app: `cdk deploy` from this folder deploys your agents on toolpipe's pipeline.

Settings come from CDK context (cdk.json, or `cdk deploy -c NAME=VALUE`): model_name,
model_base_url, model_key_secret_arn, api_auth and the others toolpipe's own stack reads; its
outputs are the same too (ApiUrl, ModelApiKeySecretArn, ...). `TOOLPIPE_BUNDLE=0 cdk synth`
writes the template without building the layers (offline). For resources of your own, build the
app with `toolpipe.cdk.build_app(...)` and add them to its stack, or put a `ToolPipeline`
construct in a stack you write.
"""

from toolpipe.cdk import synth

synth("{stack}", agents="{package}.agents")
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
    toolpipe run "Weather in Paris?"        # a local run; offline, toolpipe's demo model only
                                            # answers: set OPENAI_BASE_URL (and OPENAI_API_KEY)
                                            # for a model that calls your tools
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


def _check_package(name: str, *, taken_ok: bool = False) -> str:
    if not name.isascii() or not name.isidentifier() or keyword.iskeyword(name):
        raise ScaffoldError(f"'{name}' is not a Python package name (ASCII letters, digits and _)")
    if name in {"toolpipe", "shared", "functions", "infra", "tests", "test"}:
        raise ScaffoldError(
            f"'{name}' would clash with a package the project uses: choose another with --package"
        )
    # A name Python already resolves (the standard library's `json`, an installed `boto3`) would
    # be shadowed by the project, or shadow it: either breaks something.
    if not taken_ok and (name in sys.stdlib_module_names or importlib.util.find_spec(name) is not None):
        raise ScaffoldError(
            f"'{name}' is already a module here (standard library or installed): choose another with --package"
        )
    return name


def toolpipe_source() -> str | None:
    """Where this toolpipe was installed from, as a URL pip can install from again: its source
    checkout, or what pip recorded (PEP 610). None when neither is known."""
    import importlib.metadata
    import tomllib

    import toolpipe

    root = Path(toolpipe.__file__).resolve().parent.parent
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        project = {}
    if project.get("name") == "toolpipe":
        return root.as_uri()
    try:
        recorded = importlib.metadata.distribution("toolpipe").read_text("direct_url.json")
        url = json.loads(recorded).get("url") if recorded else None
    except (importlib.metadata.PackageNotFoundError, ValueError):
        url = None
    return str(url) if url else None


def _dependencies(source: str | None) -> str:
    # Never the bare name: `toolpipe` on PyPI is another project. Named by where it came from.
    if source is None:
        return (
            "# toolpipe itself: install it first, from its repository (it is not on PyPI under this name).\n"
            "dependencies = []\n\n"
            "[project.optional-dependencies]\n"
            'dev = ["pytest>=8"]'
        )
    return (
        f'dependencies = ["toolpipe @ {source}"]\n\n'
        "[project.optional-dependencies]\n"
        "# The local runtime (tests, `toolpipe run`) and the CDK app.\n"
        f'dev = ["toolpipe[local] @ {source}", "pytest>=8"]'
    )


def project_files(
    package: str, *, with_example: bool = True, source: str | None = None, taken_ok: bool = False
) -> dict[str, str]:
    """The project's files by relative path; `with_example`: the weather agent and its test;
    `source`: where its toolpipe dependency installs from (see `toolpipe_source`); `taken_ok`:
    the package may already be importable (it is this project's, installed)."""
    package = _check_package(package, taken_ok=taken_ok)
    dist = package.replace("_", "-")
    stack = "".join(part.capitalize() for part in package.split("_")) or "Agents"
    files = {
        "pyproject.toml": PYPROJECT.format(dist=dist, package=package, dependencies=_dependencies(source)),
        "cdk.json": cdk_json(),
        "cdk_app.py": CDK_APP.format(stack=stack, package=package),
        ".gitignore": GITIGNORE,
        "README.md": README.format(dist=dist, package=package),
        f"{package}/__init__.py": f'"""{dist}: agents on toolpipe."""\n',
    }
    if with_example:
        files[f"{package}/agents.py"] = _AGENTS
        files["tests/test_agents.py"] = _TEST.replace("{package}", package)
    return files


def init_project(folder: Path, package: str | None = None) -> list[Path]:
    """Write a new project into `folder` (created if missing); never overwrites a file."""
    if folder.exists() and not folder.is_dir():
        raise ScaffoldError(f"{folder} is a file, not a folder")
    package = package or package_name(folder)
    files = project_files(package, source=toolpipe_source(), taken_ok=True)
    clashes = [name for name in files if (folder / name).exists()]
    if clashes:
        raise ScaffoldError(f"{folder}: {', '.join(sorted(clashes))} already exist; nothing written")
    _check_package(package)  # now that its files are not there: the name itself
    written = []
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
