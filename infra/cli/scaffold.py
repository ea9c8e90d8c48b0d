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
# By version, never by a path of the machine that made the project. `toolpipe` on PyPI is another
# project: install toolpipe first (its wheel or git URL: README.md), then pip keeps that one.
dependencies = ["{toolpipe}"]

[project.optional-dependencies]
# The tests and `toolpipe run`: the local runtime, no CDK.
test = ["toolpipe[local]{version}", "pytest>=8"]
# `make synth` and `make deploy`: the CDK app.
deploy = ["toolpipe[cdk]{version}"]

[tool.setuptools]
packages = ["{package}"]

# The module that defines your agents: `toolpipe run`, `toolpipe serve` and the CDK app load it.
[tool.toolpipe]
app = "{package}.agents"
{scripted_model}
[tool.pytest.ini_options]
testpaths = ["tests"]
"""

# What `toolpipe run` answers with when no OPENAI_BASE_URL is set (pyproject.toml's
# `scripted_model`): the first `toolpipe run "What is the weather in Paris?"` calls the tool.
_SCRIPTED_MODEL_KEY = """# The model `toolpipe run` and `serve` use when no OPENAI_BASE_URL is set: scripted, offline.
scripted_model = "scripted_model.yaml"
"""

_SCRIPTED_MODEL = """# What the scripted model answers when no OPENAI_BASE_URL is set (pyproject.toml's
# `scripted_model`). The first script whose `when` matches the run's prompt plays its replies in
# order, one per model call. Add a script for each tool you write; set OPENAI_BASE_URL (and
# OPENAI_API_KEY) for a real model instead.
scripts:
  - when: 'weather in (?P<city>[A-Za-z ]+)'   # a regex searched in the prompt, case-insensitive
    replies:
      - tool_calls:
          - name: get_weather
            arguments: {city: '{city}'}        # {city}: the named group of `when`
      - content: '{results}'                  # {results}: the previous turn's tool results
"""

# The version range of toolpipe a new project depends on: this toolpipe's minor version.
_TOOLPIPE_VERSION = "~=0.1.0"


def cdk_json() -> str:
    """The project's cdk.json: its CDK app, and the CDK feature flags toolpipe's apps are built
    with (infra/cdk/feature_flags.py; `build_app` applies them too), as `cdk init` would write them."""
    context = {"model_name": "gpt-4o-mini", "model_base_url": "", **FEATURE_FLAGS}
    return json.dumps({"app": "python cdk_app.py", "context": context}, indent=2) + "\n"


# The CDK CLI and the Node it runs on, the ranges of toolpipe's own package.json (a test keeps them
# equal): aws-cdk 3.x cannot read the assemblies aws-cdk-lib 2.x writes; the npm package `node`
# puts Node 22 in node_modules/.bin, whatever Node runs npm.
def package_json(dist: str) -> str:
    """The project's package.json: the CDK CLI `make synth` and `make deploy` run."""
    package = {
        "name": f"{dist}-cdk-cli",
        "private": True,
        "description": "The CDK CLI (`make synth`, `make deploy`) and the Node 22 it runs on.",
        "engines": {"node": ">=22"},
        "devDependencies": {"aws-cdk": "^2.1000.0", "node": "^22.23.3"},
        "allowScripts": {"node": True},
    }
    return json.dumps(package, indent=2) + "\n"


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
build/
dist/
.toolpipe/
cdk.out/
node_modules/
"""

MAKEFILE = """# make install: the .venv (tests and CDK app) and the CDK CLI; make test; make synth; make deploy.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The venv's python first (cdk.json runs `python cdk_app.py`), then the CDK CLI and the Node 22
# it runs on (package.json).
export PATH := $(CURDIR)/$(BIN):$(CURDIR)/node_modules/.bin:$(PATH)
export CDK_DISABLE_VERSION_CHECK := 1

# Where toolpipe installs from until it is published (`toolpipe` on PyPI is another project):
# TOOLPIPE_WHEELS, a folder with its wheel (`pip wheel --no-deps -w DIR path/to/toolpipe-clone`);
# or TOOLPIPE_SOURCE, anything pip installs (a clone's folder, git+https://...).
TOOLPIPE_WHEELS ?=
TOOLPIPE_SOURCE ?=

# `make deploy`'s settings, passed to the CDK app as context (cdk.json holds the defaults).
MODEL_NAME ?= gpt-4o-mini
MODEL_BASE_URL ?=
MODEL_KEY_SECRET_ARN ?=

.PHONY: install test synth bootstrap deploy

install: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: pyproject.toml
\ttest -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
\t$(if $(TOOLPIPE_WHEELS),$(BIN)/python -m pip install --quiet --no-deps --no-index --find-links '$(TOOLPIPE_WHEELS)' toolpipe)
\t$(if $(TOOLPIPE_SOURCE),$(BIN)/python -m pip install --quiet --no-deps '$(TOOLPIPE_SOURCE)')
\t@# Never let pip fetch `toolpipe` from PyPI: that is someone else's project.
\t@$(BIN)/python -c 'import importlib.util as u; u.find_spec("toolpipe.testing") or exit(1)' 2>/dev/null || \\
\t{ echo "make install: toolpipe is not installed in $(VENV) and PyPI's toolpipe is another project: make install TOOLPIPE_WHEELS=DIR or TOOLPIPE_SOURCE=git+URL (README.md)" >&2; exit 1; }
\t$(BIN)/python -m pip install --quiet -e '.[test,deploy]'
\ttouch $@

node_modules/.installed: package.json $(wildcard package-lock.json)
\tif [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
\ttouch $@

# The agents, driven offline by a scripted model (tests/).
test: $(VENV)/.installed
\t$(BIN)/python -m pytest

# The CloudFormation template into cdk.out/, offline: the layers are not built.
synth: install
\tTOOLPIPE_BUNDLE=0 cdk synth --quiet

# Once per AWS account and region: the CDK's staging bucket and roles.
bootstrap: install
\tcdk bootstrap

# Builds the layers with pip (needs PyPI), then deploys with your AWS credentials:
# make deploy MODEL_NAME=gpt-4o-mini MODEL_KEY_SECRET_ARN=arn:aws:secretsmanager:...
deploy: install
\tcdk deploy -c 'model_name=$(MODEL_NAME)' \\
\t  $(if $(MODEL_BASE_URL),-c 'model_base_url=$(MODEL_BASE_URL)') \\
\t  $(if $(MODEL_KEY_SECRET_ARN),-c 'model_key_secret_arn=$(MODEL_KEY_SECRET_ARN)')
"""

README = """# {dist}

Agents on toolpipe: `{package}/agents.py` defines them; `tests/` drives them offline.

    make install TOOLPIPE_WHEELS=DIR   # or TOOLPIPE_SOURCE=git+URL: see "Installing toolpipe"
                     # .venv with the tests' and the CDK app's packages; the CDK CLI and Node 22
    make test        # pytest: the agents, each driven by a scripted model
    .venv/bin/toolpipe run "What is the weather in Paris?"
                     # a local run; with no OPENAI_BASE_URL, scripted_model.yaml is the model
    make synth       # the CloudFormation template, offline (cdk.out/)
    make bootstrap   # once per AWS account and region
    make deploy MODEL_NAME=gpt-4o-mini MODEL_KEY_SECRET_ARN=arn:aws:secretsmanager:...
                     # the stack {stack}; MODEL_BASE_URL for another OpenAI-compatible endpoint

Without MODEL_KEY_SECRET_ARN, `make deploy` creates an empty secret for the model's key: put
the key in the secret its `ModelApiKeySecretArn` output names (`aws secretsmanager
put-secret-value --secret-id ARN --secret-string KEY`). Its `ApiUrl` output is what `toolpipe
run --api URL` talks to.

A new AWS account has no API Gateway logging role, so the stack creates one and sets it for the
region (kept when the stack is deleted). If your account manages that setting, add
`"api_gateway_cloudwatch_role": false` to cdk.json's context: the API stage then writes no logs.

## Installing toolpipe

`toolpipe` on PyPI is another project, so `make install` never asks PyPI for it; give it
toolpipe's wheel or source until toolpipe is published:

    git clone <toolpipe's repository URL> ../toolpipe
    pip wheel --no-deps -w ../toolpipe-wheels ../toolpipe
    make install TOOLPIPE_WHEELS=../toolpipe-wheels
    # or: make install TOOLPIPE_SOURCE=git+<toolpipe's repository URL>

By hand, in a virtualenv of your own: `pip install --no-deps 'toolpipe @ git+<URL>'` (or the
wheel), then `pip install -e '.[test]'` for the tests alone (no CDK: a lighter install) or
`pip install -e '.[test,deploy]'` for the CDK app too. pip keeps the toolpipe it finds installed.
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


def project_files(package: str, *, with_example: bool = True, taken_ok: bool = False) -> dict[str, str]:
    """The project's files by relative path; `with_example`: the weather agent, its test and the
    scripted model that calls its tool; `taken_ok`: the package may already be importable (it is
    this project's, installed)."""
    package = _check_package(package, taken_ok=taken_ok)
    dist = package.replace("_", "-")
    stack = "".join(part.capitalize() for part in package.split("_")) or "Agents"
    pyproject = PYPROJECT.format(
        dist=dist,
        package=package,
        toolpipe=f"toolpipe{_TOOLPIPE_VERSION}",
        version=_TOOLPIPE_VERSION,
        scripted_model=_SCRIPTED_MODEL_KEY if with_example else "",
    )
    files = {
        "pyproject.toml": pyproject,
        "cdk.json": cdk_json(),
        "cdk_app.py": CDK_APP.format(stack=stack, package=package),
        "package.json": package_json(dist),
        ".nvmrc": "22\n",
        "Makefile": MAKEFILE,
        ".gitignore": GITIGNORE,
        "README.md": README.format(dist=dist, package=package, stack=stack),
        f"{package}/__init__.py": f'"""{dist}: agents on toolpipe."""\n',
    }
    if with_example:
        files[f"{package}/agents.py"] = _AGENTS
        files["tests/test_agents.py"] = _TEST.replace("{package}", package)
        files["scripted_model.yaml"] = _SCRIPTED_MODEL
    return files


def init_project(folder: Path, package: str | None = None) -> list[Path]:
    """Write a new project into `folder` (created if missing); never overwrites a file."""
    if folder.exists() and not folder.is_dir():
        raise ScaffoldError(f"{folder} is a file, not a folder")
    package = package or package_name(folder)
    files = project_files(package, taken_ok=True)
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
