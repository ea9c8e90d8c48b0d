"""A client generated from the OpenAPI document the local server serves, used as a client author
uses it (issue 35, item 6): openapi-python-client writes it into a temporary folder (never
committed), and it drives a run end to end against the local server: start, poll, read the
history, approve a gated call, see the run finish. Every answer it gets is also validated against
the same document with openapi-core, a validator that shares no code with the one that wrote it.

One test: generating the client costs ~1 s, importing it ~0.5 s.
"""

import importlib
import json
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from tests.conftest import Pipeline, call, gated_server
from tests.e2e.test_approvals import GATED
from tests.openapi_check import checker, response_conforms
from toolpipe.infra.local.runtime import LOCAL_CALLER
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.infra.local.server import LocalServer

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "snippets" / "generated_client.py"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "toolpipe_api_client"  # the generated package: a name no installed one has


@pytest.fixture
def local_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Pipeline, LocalServer]]:
    yield from gated_server(monkeypatch, GATED)


@pytest.fixture
def generated(
    local_server: tuple[Pipeline, LocalServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The client package generated from the served document, imported, and the document."""
    _, server = local_server
    document = httpx.get(f"{server.api_url}/openapi.json", timeout=30).json()
    (tmp_path / "openapi.json").write_text(json.dumps(document))
    result = subprocess.run(
        [str(GENERATOR), "generate", "--path", "openapi.json", "--meta", "none", "--output-path", PACKAGE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # It warns only that ruff (its formatter) is not on PATH; anything it could not generate
    # is an error line naming the schema or operation.
    assert result.returncode == 0 and "Unable to" not in result.stdout + result.stderr, result.stderr[-3000:]
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(PACKAGE), document
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


def _module(package: Any, name: str) -> Any:
    return importlib.import_module(f"{package.__name__}.{name}")


def test_a_generated_client_drives_a_run_with_an_approval(
    local_server: tuple[Pipeline, LocalServer], generated: tuple[Any, dict[str, Any]]
) -> None:
    pipeline, server = local_server
    package, document = generated
    spec = checker(document)
    answered: list[tuple[str, str, int]] = []

    def conforms(response: httpx.Response) -> None:
        # Every real answer the client gets, against the document it was generated from.
        response.read()
        request = response.request
        target = request.url.raw_path.decode().removeprefix("/v1")
        body = json.loads(response.content) if response.content else None
        sent = json.loads(request.content) if request.content else None
        response_conforms(spec, request.method, target, response.status_code, body, sent)
        answered.append((request.method, target.partition("?")[0], response.status_code))

    models = _module(package, "models")
    # The docs' example (docs/snippets/generated_client.py), on the client generated here.
    example = runpy.run_path(str(EXAMPLE))
    client = attrs.evolve(
        example["local_client"](server.api_url, LOCAL_CALLER),
        httpx_args={"event_hooks": {"response": [conforms]}},
    )
    pipeline.script(
        Reply(tool_calls=[call("wire_money", to="ana", amount=250)]),
        Reply(content="Sent 250 to ana."),
    )
    request = models.StartRunRequest(input_="pay ana 250", agent=models.StartRunRequestAgentType0.GATED)
    run, history = example["run_approving"](client, request)

    assert (run.status, run.output, run.waiting_for) == (models.RunStatus.SUCCEEDED, "Sent 250 to ana.", None)
    run_id = run.run_id
    # Typed by their kind: the client's own classes, not dicts.
    assert [type(m).__name__ for m in history] == [
        "UserMessageView",
        "AssistantMessageView",
        "ToolResultView",
        "AssistantMessageView",
    ]
    assert history[2].content == "sent 250.0 to ana"
    # `run_approving` approves only once the run says it waits for a person: it said so.
    assert [status for method, path, status in answered if path.endswith("/approve")] == [200]
    get_run = _module(package, "api.runs.get_run")
    shown = get_run.sync(run_id, client=client)
    assert shown.executions[0].arguments.additional_properties == {"to": "ana", "amount": 250}

    page = _module(package, "api.messages.list_messages").sync(run_id, client=client, limit=2)
    assert len(page.messages) == 2 and page.next_
    whole = _module(package, "api.messages.get_message").sync(run_id, 3, client=client)
    assert isinstance(whole, models.ToolResultView) and whole.status == "ok"
    missing = get_run.sync("no-such-run", client=client)
    assert isinstance(missing, models.ErrorBody) and missing.status_code == 404

    assert len(answered) >= 8  # every answer above was validated
