"""Schemathesis against a real `toolpipe serve`: every request the OpenAPI document it serves
admits is accepted (never a 400 for input the document calls valid), none is a 5xx, and every
answer matches the document. Offline: the server, its scripted model and the document are all
on 127.0.0.1.

Bounded and reproducible: a fixed number of cases per operation, generated deterministically
(no seed, no example database), on one worker; the run must end within `BUDGET_SECONDS`.
"""

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_serve import PROMPT, Served, _http
from toolpipe.shared.agents import all_agents

SCHEMATHESIS = Path(sys.executable).with_name("st")
CHECKS = (
    "not_a_server_error",  # no 5xx (a 501 included)
    "positive_data_acceptance",  # no 4xx but 401, 403, 404, 409, 429 for schema-valid input
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)
EXAMPLES_PER_OPERATION = 40
BUDGET_SECONDS = 120  # measured ~35 s on a 2-core machine; the bound is for a loaded one


def as_the_server_checks(document: dict[str, Any]) -> dict[str, Any]:
    """The served document with two checks the server makes beyond what it can say, so that a
    case Schemathesis makes is one the server must take. The time zone: the document gives
    the pattern (a zone list differs by runtime and breaks generated clients), the server also
    wants a zone its tz database has. The tools: the document lists any agent's, the server
    wants the named agent's (every agent's, as no case ties the list to the agent)."""
    narrowed = copy.deepcopy(document)
    start = narrowed["components"]["schemas"]["StartRunRequest"]["properties"]
    start["timezone"]["enum"] = ["UTC", "Europe/Paris", "Etc/GMT+1", "America/Argentina/Buenos_Aires"]
    every = set.intersection(*({tool.name for tool in agent.tools} for agent in all_agents()))
    listed = start["tools"]["anyOf"][0]
    if every:
        listed["items"]["enum"] = sorted(every)
    else:
        listed["maxItems"] = 0
    return narrowed


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    # A run naming its own MCP servers makes the workers call those URLs: a deployment that does
    # not allow it (the default) says so in its document, and no case names one.
    monkeypatch.setenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "0")
    server = Served(tmp_path / "home")
    yield server
    code, output = server.stop()
    assert code == 0, output


def test_every_request_the_served_document_admits_is_accepted(served: Served, tmp_path: Path) -> None:
    # Identifiers only the API hands out, as Schemathesis advises: a run and a page token. With
    # random ones every run operation would stop at a 404, a listing at its first page.
    run_ids = [
        _http(served.url, "POST", "/v1/runs", json.dumps({"input": PROMPT}).encode())[1]["run_id"]
        for _ in range(2)
    ]
    status, page, _ = _http(served.url, "GET", "/v1/runs?limit=1")
    assert status == 200 and page["next"], page
    (tmp_path / "schemathesis.toml").write_text(
        f'[parameters]\nrun_id = "{run_ids[0]}"\n"query.next" = "{page["next"]}"\n'
    )
    report = tmp_path / "report.json"
    status, document, _ = _http(served.url, "GET", "/v1/openapi.json")
    assert status == 200
    schema = tmp_path / "openapi.json"
    schema.write_text(json.dumps(as_the_server_checks(document)))

    result = subprocess.run(
        [
            str(SCHEMATHESIS),
            "run",
            str(schema),
            "--url",
            served.api_url,
            "--checks",
            ",".join(CHECKS),
            "--mode",
            "positive",
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            str(EXAMPLES_PER_OPERATION),
            "--generation-deterministic",
            "--workers",
            "1",
            "--no-color",
            "--report",
            "json",
            "--report-json-path",
            str(report),
        ],
        cwd=tmp_path,  # its schemathesis.toml, and nothing of the repository's
        capture_output=True,
        text=True,
        timeout=BUDGET_SECONDS,
    )

    assert result.returncode == 0, result.stdout[-20_000:] + result.stderr[-2_000:]
    summary = json.loads(report.read_text())
    print(f"schemathesis: {summary['test_cases']['generated']} cases in {summary['running_time']:.1f} s")
    assert summary["test_cases"]["generated"] >= 300  # every operation was exercised, not skipped
