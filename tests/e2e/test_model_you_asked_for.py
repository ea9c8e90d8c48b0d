"""`toolpipe run` with OPENAI_BASE_URL set never runs on a server that uses another model: a
`toolpipe serve` a person started is refused in one line; a server another command started for
itself is waited for and replaced (real processes, real scripted model servers)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from toolpipe.infra.local.client import Client
from toolpipe.infra.local.scripted_model import HttpError, Reply, ScriptedModelServer, ScriptResponder

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "What is 2 + 3?"


def _env(home: Path, model_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    # The example app of this checkout, before any installed copy.
    env |= {
        "TOOLPIPE_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "examples" / "assistant")]),
    }
    return env | ({"OPENAI_BASE_URL": model_url, "OPENAI_API_KEY": "sk-test"} if model_url else {})


def _popen(home: Path, model_url: str | None, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "toolpipe.infra.cli", *args],
        cwd=ROOT,
        env=_env(home, model_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, err


def test_a_person_s_server_on_another_model_is_refused_in_one_line_and_starts_no_run(
    tmp_path: Path,
) -> None:
    serve = _popen(tmp_path, None, "serve", "--port", "0", "--json")
    try:
        assert serve.stdout is not None
        ready: dict[str, Any] = json.loads(serve.stdout.readline())
        state = f"toolpipe: state folder {tmp_path}\n"
        with ScriptedModelServer(ScriptResponder([Reply(content="from B")])) as other:
            # A trailing slash is the same endpoint: the refusal names it as compared.
            code, out, err = _finish(_popen(tmp_path, other.base_url + "/", "run", PROMPT))
            assert other.requests == []
        assert (code, out) == (2, "")
        assert err == state + (
            f"toolpipe: error: the server at {ready['url']} uses {ready['model_endpoint']}; "
            f"you asked for {other.base_url}: stop it or unset OPENAI_BASE_URL\n"
        )
        assert "set OPENAI_BASE_URL for a real one" not in err
        status, runs = Client(ready["url"]).request("GET", "/runs")
        assert status == 200 and runs["runs"] == []

        # Asking for no model: whatever runs, and the hint, to someone who set none.
        code, out, err = _finish(_popen(tmp_path, None, "run", PROMPT))
        assert code == 0, err
        assert (
            err == f"{state}model endpoint: {ready['model_endpoint']} (set OPENAI_BASE_URL for a real one)\n"
        )
    finally:
        serve.send_signal(signal.SIGTERM)
        _finish(serve)


def test_a_server_another_command_started_is_replaced_by_one_on_the_model_asked_for(
    tmp_path: Path,
) -> None:
    arrived, release = threading.Event(), threading.Event()

    def first_model(request: dict[str, Any]) -> Reply:
        arrived.set()
        release.wait(90)  # the first run stays in progress until the second one waits
        return Reply(content="from A")

    with (
        ScriptedModelServer(first_model) as model_a,
        ScriptedModelServer(ScriptResponder([Reply(content="from B")])) as model_b,
    ):
        first = _popen(tmp_path, model_a.base_url, "run", PROMPT, "--timeout", "90")
        assert arrived.wait(90), "the first run never called its model"
        second = _popen(tmp_path, model_b.base_url, "run", PROMPT, "--timeout", "90")
        try:
            assert second.stderr is not None
            said = [second.stderr.readline(), second.stderr.readline()]
            assert said[1].startswith("toolpipe: waiting for the server at "), said
            assert f"with {model_a.base_url}) to stop, to start one with {model_b.base_url}\n" in said[1]
        finally:
            release.set()
        code_a, out_a, err_a = _finish(first)
        code_b, out_b, err_b = _finish(second)
        assert len(model_a.requests) == 1 and len(model_b.requests) == 1
    assert code_a == 0 and "answer: from A" in out_a, err_a
    assert code_b == 0 and "answer: from B" in out_b, err_b
    assert err_b == f"model endpoint: {model_b.base_url}\n"  # the rest of its stderr, no hint


def test_a_dead_endpoint_is_one_line_naming_the_variable_within_seconds(tmp_path: Path) -> None:
    """Issue 33, item 4: `OPENAI_BASE_URL=http://127.0.0.1:9/v1 toolpipe run …` printed nothing
    for 54 s (a refused connection retried), then a ModelCallError with no word of the variable."""
    for command in (("run", PROMPT), ("serve", "--port", "0")):
        started = time.monotonic()
        code, out, err = _finish(_popen(tmp_path, "http://127.0.0.1:9/v1", *command))
        assert time.monotonic() - started < 20, err  # not the 54 s of retries it was
        assert code == 2 and out == ""
        assert err.splitlines()[-1] == (
            "toolpipe: error: OPENAI_BASE_URL=http://127.0.0.1:9/v1: cannot connect to 127.0.0.1:9 "
            "(connection refused): start the model server there, correct the variable, or unset it "
            "for the scripted demo model"
        )
    assert not (tmp_path / "server.json").exists()


def test_an_endpoint_that_refuses_the_request_is_named_in_the_runs_error(tmp_path: Path) -> None:
    # Reached, but not a chat completions API (a wrong path, say): the run fails at once.
    wrong = HttpError(404, {"error": {"message": "Not Found", "type": "invalid_request_error"}})
    with ScriptedModelServer(lambda request: wrong) as model:
        code, out, err = _finish(_popen(tmp_path, model.base_url, "run", PROMPT, "--agent", "assistant"))
    assert code == 1 and "status: failed" in out, out + err
    assert err.splitlines()[-1].endswith(
        f"model endpoint refused the request: 404 Not Found (the model at OPENAI_BASE_URL={model.base_url})"
    ), err
