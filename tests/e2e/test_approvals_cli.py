"""`toolpipe run` says when a call waits for approval and keeps waiting; `toolpipe approve`,
`deny` and `approvals` decide and list, as a shell sees them (real processes, the local server)."""

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _pipeline, call
from tests.e2e.test_approvals import GATED, pending
from toolpipe.infra.cli import main
from toolpipe.infra.local.api_proxy import proxy_event
from toolpipe.infra.local.runtime import LOCAL_CALLER
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.infra.local.server import LocalServer
from toolpipe.shared.agents import AGENTS

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Email ana@example.com saying the report is ready"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    # The example app of this checkout (its send_email), before any installed copy.
    path = os.pathsep.join([str(ROOT), str(ROOT / "examples" / "assistant")])
    return {**env, "TOOLPIPE_HOME": str(home), "PYTHONPATH": path}


def _toolpipe(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolpipe.infra.cli", *args],
        env=_env(home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_prints_how_to_approve_and_finishes_once_approved(tmp_path: Path) -> None:
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolpipe.infra.cli",
            "run",
            PROMPT,
            "--agent",
            "assistant",
            "--timeout",
            "90",
        ],
        env=_env(tmp_path),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None
        lines: list[str] = []
        for line in run.stdout:
            lines.append(line)
            if "approve" in line:
                break
        waiting = lines[-1]
        match = re.search(r"toolpipe approve ([0-9a-f]{32})", waiting)
        assert match, lines
        approval_id = match.group(1)
        assert "send_email(" in waiting and "ana@example.com" in waiting
        # The signed link to the approval page, on a line of its own that says "approve".
        link = next(run.stdout)
        assert "approve" in link
        assert re.search(
            rf"http://127\.0\.0\.1:\d+/v1/approvals/{approval_id}/page\?exp=\d+&kid=\S{{8}}&sig=\S{{43}}",
            link,
        )

        listed = _toolpipe(tmp_path, "approvals", "--json")
        assert listed.returncode == 0, listed.stderr
        [pending] = json.loads(listed.stdout)["approvals"]
        assert (pending["approval_id"], pending["status"]) == (approval_id, "pending")

        assert _toolpipe(tmp_path, "deny", "not-an-id", "--reason", "x").returncode == 2
        # Edited arguments are checked as the model's are: refused in one line, nothing decided.
        bad = _toolpipe(tmp_path, "approve", approval_id, "--arguments", '{"to": "ana@example.com"}')
        assert bad.returncode != 0 and "Invalid arguments for 'send_email'" in bad.stderr
        assert _toolpipe(tmp_path, "approve", approval_id, "--arguments", "[1]").returncode == 2
        edited = {"to": "ana@example.com", "subject": "Report", "body": "The report is ready (edited)."}
        approved = _toolpipe(tmp_path, "approve", approval_id, "--arguments", json.dumps(edited))
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.startswith(f"approved {approval_id} (run ")

        rest, errors = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, errors
    assert "Email sent to ana@example.com" in rest
    assert "Note: a person changed the arguments before approving" in rest  # the model was told
    again = _toolpipe(tmp_path, "deny", approval_id, "--reason", "too late")
    assert again.returncode == 1
    assert again.stderr.splitlines()[-1] == (
        f"toolpipe: error: approval {approval_id} is already approved: the first decision stands"
    )
    decided: Any = json.loads(_toolpipe(tmp_path, "approvals", "--status", "all", "--json").stdout)
    assert [a["status"] for a in decided["approvals"]] == ["approved"]


def test_run_against_an_api_url_prints_the_approval_line_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --api` (the deployed API has no event stream) finds waiting calls by polling."""
    monkeypatch.setitem(AGENTS, GATED.name, GATED)
    for pipeline in _pipeline():
        with LocalServer(pipeline.runtime) as server:
            pipeline.script(
                Reply(tool_calls=[call("wire_money", to="ana", amount=5)]), Reply(content="Sent.")
            )
            out, codes = io.StringIO(), []
            command = ["run", "pay ana", "--agent", "gated", "--api", f"{server.api_url}/"]
            thread = threading.Thread(
                target=lambda command=command, out=out, codes=codes: codes.append(
                    main(command, out=out, err=io.StringIO())
                )
            )
            thread.start()
            deadline = time.monotonic() + 30
            while "toolpipe approve" not in out.getvalue():
                assert time.monotonic() < deadline and thread.is_alive(), out.getvalue()
                time.sleep(0.05)
            [approval] = server.api.get("/approvals?status=pending", LOCAL_CALLER)[1]["approvals"]
            # Through the server's one-at-a-time API function, as the polling `run` is.
            server.api(
                proxy_event(
                    "POST", f"/approvals/{approval['approval_id']}/approve", "", [], b"", LOCAL_CALLER
                )
            )
            thread.join(60)
    assert codes == [0], out.getvalue()
    printed = out.getvalue()
    assert printed.count(f"toolpipe approve {approval['approval_id']}") == 1
    assert "-> wire_money: sent 5.0 to ana" in printed


def test_a_second_approve_is_refused_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33, item 7: `approve` a second time printed `approved …` again and exited 0."""
    monkeypatch.setitem(AGENTS, GATED.name, GATED)
    for pipeline in _pipeline():
        with LocalServer(pipeline.runtime) as server:
            pipeline.script(
                Reply(tool_calls=[call("wire_money", to="ana", amount=5)]), Reply(content="Sent.")
            )
            run_id = pipeline.start("pay ana", agent="gated")
            approval_id = pending(pipeline)["approval_id"]
            api = ["--api", f"{server.api_url}/"]
            outs, errs = [io.StringIO() for _ in range(2)], [io.StringIO() for _ in range(2)]
            codes = [
                main(["approve", approval_id, *api], out=o, err=e) for o, e in zip(outs, errs, strict=True)
            ]
            body = pipeline.finish(run_id)
    assert codes == [0, 1], [e.getvalue() for e in errs]
    assert outs[0].getvalue() == f"approved {approval_id} (run {run_id})\n"
    assert outs[1].getvalue() == ""
    assert errs[1].getvalue().splitlines() == [
        f"toolpipe: error: approval {approval_id} is already approved: the first decision stands"
    ]
    assert body["run"]["status"] == "succeeded" and body["run"]["output"] == "Sent."
    results = [m["content"] for m in body["messages"] if m["kind"] == "tool_result"]
    assert results == ["sent 5.0 to ana"]  # run once
