"""`toolpipe run` says what a deferred call waits for and keeps waiting; `toolpipe answer` gives
a person's answer, as a shell sees it (real processes, the local server, the example's ask_user)."""

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_approvals_cli import ROOT, _env, _toolpipe
from toolpipe.infra.cli.output import approval_line


def test_run_prints_the_question_and_finishes_once_answered(tmp_path: Path) -> None:
    run = subprocess.Popen(
        [sys.executable, "-m", "toolpipe.infra.cli", "run", "Ask me which city to book", "--timeout", "90"],
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
            if "answer with" in line:
                break
        waiting = lines[-1]
        match = re.search(r"toolpipe answer ([0-9a-f]{32}) \"…\"", waiting)
        assert match, lines
        approval_id = match.group(1)
        assert "ask_user asks: Which city to book?" in waiting
        # The question's signed link, on the next line, which says "answer".
        link = run.stdout.readline()
        assert re.fullmatch(
            rf"  or answer in a browser: http://127\.0\.0\.1:\d+/v1/approvals/{approval_id}/page"
            r"\?exp=\d+&kid=[A-Za-z0-9_-]{8}&sig=[A-Za-z0-9_-]{43}\n",
            link,
        ), link

        listed = _toolpipe(tmp_path, "approvals")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.startswith(f"{approval_id}  human  pending  asks: Which city to book?  run ")
        answered = _toolpipe(tmp_path, "answer", approval_id, "Lyon, in May")
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.startswith(f"answered {approval_id} (run ")

        rest, errors = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, errors
    assert "-> ask_user: Lyon, in May" in rest
    again = _toolpipe(tmp_path, "answer", approval_id, "--value", '"Paris"')
    assert again.returncode == 1
    assert again.stderr.splitlines()[-1] == (
        f"toolpipe: error: approval {approval_id} is already answered: the first decision stands"
    )
    shown = json.loads(_toolpipe(tmp_path, "approvals", "--status", "answered", "--json").stdout)
    assert [(a["status"], a["answer_preview"]) for a in shown["approvals"]] == [("answered", "Lyon, in May")]


def test_a_client_call_is_announced_with_the_request_to_make() -> None:
    line = approval_line(
        {
            "kind": "client",
            "approval_id": "0" * 32,
            "run_id": "r1",
            "seq": 3,
            "tool": "read_clipboard",
            "arguments_preview": '{"format": "text"}',
        }
    )
    assert line == (
        '  waiting for your program: read_clipboard({"format": "text"}) · post its result: '
        'POST /runs/r1/calls/3/result {"result": …} (or {"error": "…"})'
    )


def test_a_question_with_a_link_is_announced_with_the_link_on_a_line_that_says_answer() -> None:
    asked = {
        "kind": "human",
        "approval_id": "0" * 32,
        "tool": "ask_user",
        "question": "Which city?",
        "callback_url": "http://127.0.0.1:8710/v1/approvals/00/page?exp=1&sig=s",
    }
    assert approval_line(asked).splitlines() == [
        f'  waiting for an answer: ask_user asks: Which city? · answer with: toolpipe answer {"0" * 32} "…"',
        "  or answer in a browser: http://127.0.0.1:8710/v1/approvals/00/page?exp=1&sig=s",
    ]
    assert len(approval_line(asked | {"callback_url": None}).splitlines()) == 1  # no URL known: no line
