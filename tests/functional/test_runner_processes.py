"""The tool runner as Lambda runs it (issue 32): its template is forked when the handler module
is imported at the cold start, each invocation's call runs in a process forked from it, and what
a call leaves (patches, threads, processes, files in /tmp, environment) is gone for the next
invocation, of any run. Run in a process of its own that Lambda's runtime variable marks as one."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_INVOKE = textwrap.dedent(
    """
    import json, os, sys, uuid
    from toolpipe.functions.tool_runner import handler

    class Context:
        function_name = "ToolRunner"
        memory_limit_in_mb = 512
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ToolRunner"
        aws_request_id = "r"
        def get_remaining_time_in_millis(self):
            return 60_000

    import ctypes
    print("DUMPABLE", ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
    answers = []
    for line in sys.stdin:
        call = json.loads(line)
        if "sleep" in call:
            import time
            time.sleep(call["sleep"])
            continue
        event = {
            "run_id": call["run"], "agent": "prober", "idempotency_key": uuid.uuid4().hex,
            "call": {"id": uuid.uuid4().hex, "name": call["tool"], "arguments": json.dumps(call["arguments"])},
        }
        if "time_limit" in call:
            event["time_limit"] = call["time_limit"]
        answers.append(handler.lambda_handler(event, Context()))
    sys.stdout.write("ANSWERS " + json.dumps(answers) + "\\n")
    """
)


def _invoke(tmp_path: Path, *calls: dict[str, object]) -> list[dict[str, object]]:
    return _run(tmp_path, *calls)[0]


def _run(tmp_path: Path, *calls: dict[str, object]) -> tuple[list[dict[str, object]], str]:
    lambda_tmp = tmp_path / "lambda-tmp"
    lambda_tmp.mkdir(exist_ok=True)
    (lambda_tmp / "there-at-start").write_text("kept")
    (lambda_tmp / "folder-at-start").mkdir(exist_ok=True)
    (lambda_tmp / "folder-at-start" / "inside").write_text("kept too")
    env = {
        **os.environ,
        "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9",  # what makes the handler fork its template
        "TMPDIR": str(lambda_tmp),
        "TOOLPIPE_APP": "tests.e2e.process_app",
        "BUCKET_NAME": "contents",
        "PYTHONPATH": str(ROOT),
        "POWERTOOLS_LOG_LEVEL": "ERROR",
    }
    done = subprocess.run(
        [sys.executable, "-c", _INVOKE],
        input="".join(json.dumps(c) + "\n" for c in calls),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("ANSWERS "))
    return list(json.loads(line.removeprefix("ANSWERS "))), done.stdout


def test_a_warm_runner_keeps_nothing_a_call_left_for_the_next_invocation(tmp_path: Path) -> None:
    log = tmp_path / "writes.log"
    lambda_tmp = tmp_path / "lambda-tmp"
    tampered, seen = _invoke(
        tmp_path,
        {"run": "run-a", "tool": "tamper", "arguments": {"log": str(log), "tmp_root": str(lambda_tmp)}},
        {"run": "run-b", "tool": "look", "arguments": {}},
    )
    assert tampered["status"] == "ok", tampered
    looked = json.loads(str(seen["content"]))
    left = json.loads(str(tampered["content"]))
    assert looked["pid"] != left["pid"]
    assert looked["json_dumps_forged"] is False and looked["execute_forged"] is False
    assert looked["left_env"] is None and looked["cwd_files"] == []
    # /tmp holds what it held at the cold start, nothing a call left.
    assert sorted(os.listdir(lambda_tmp)) == ["folder-at-start", "there-at-start"]
    size = log.stat().st_size
    assert {"thread", "raw-thread", "process"} <= set(log.read_text().split())
    time.sleep(0.5)
    assert log.stat().st_size == size  # nothing it started writes any more


def test_a_call_that_kills_the_template_leaves_a_runner_that_still_answers(tmp_path: Path) -> None:
    killed, after = _invoke(
        tmp_path,
        {"run": "run-a", "tool": "kill_the_template", "arguments": {}},
        {"run": "run-b", "tool": "look", "arguments": {}},
    )
    assert killed["content"] == "killed"
    assert json.loads(str(after["content"]))["json_dumps_forged"] is False


@pytest.mark.parametrize("kill_template", [False, True])
def test_a_call_that_kills_its_supervisor_leaves_nothing_running_past_its_answer(
    tmp_path: Path, kill_template: bool
) -> None:
    """Its supervisor (and the template) killed, what the call left is re-parented to the
    template (or the runner, the subreaper above it) and ended before the answer goes back."""
    log = tmp_path / "writes.log"
    answers = _invoke(
        tmp_path,
        {"run": "run-a", "tool": "escape", "arguments": {"log": str(log), "kill_template": kill_template}},
        {"sleep": 1.5},
        {"run": "run-b", "tool": "look", "arguments": {}},
    )
    assert answers[0]["content"] == "looks fine"
    assert answers[1]["status"] == "ok"
    assert not log.exists()  # it would have written 0.5 s after the call, and every 0.1 s since


def test_the_runners_own_process_is_not_dumpable(tmp_path: Path) -> None:
    """Not dumpable: a call (same user, not root) cannot read or write its memory, where earlier
    calls' requests and answers were."""
    _, printed = _run(tmp_path, {"run": "run-a", "tool": "look", "arguments": {}})
    assert "DUMPABLE 0" in printed


def test_a_call_that_stops_the_spare_does_not_hold_up_the_next_call(tmp_path: Path) -> None:
    stopped, after = _invoke(
        tmp_path,
        {"run": "run-a", "tool": "stop_the_spare", "arguments": {}},
        {"run": "run-b", "tool": "look", "arguments": {}, "time_limit": 5},
    )
    assert stopped["content"] == "stopped 2"
    assert after["status"] == "ok", after


@pytest.mark.parametrize("signal_number", [9, 19], ids=["killed", "stopped"])
def test_a_call_that_kills_or_stops_the_next_calls_process_does_not_reach_the_next_call(
    tmp_path: Path, signal_number: int
) -> None:
    """The process forked for the next call, not its supervisor: the next call runs whole, in a
    process fit for it (a killed one replaced, a stopped one let go on)."""
    hit, after = _invoke(
        tmp_path,
        {"run": "run-a", "tool": "hit_the_spares_call", "arguments": {"signal_number": signal_number}},
        {"run": "run-b", "tool": "look", "arguments": {}, "time_limit": 5},
    )
    assert hit["content"] == "signalled 1"
    assert after["status"] == "ok", after
    assert json.loads(str(after["content"]))["json_dumps_forged"] is False


def test_what_a_call_changes_in_tmp_is_not_read_by_the_next_call(tmp_path: Path) -> None:
    """A file there at the cold start that a call rewrites (its size and modification time put
    back), or one it adds in a folder that was there, is removed before the next call."""
    root = str(tmp_path / "lambda-tmp")
    rewritten, seen = _invoke(
        tmp_path,
        {"run": "run-a", "tool": "rewrite_tmp", "arguments": {"root": root}},
        {"run": "run-b", "tool": "read_tmp", "arguments": {"root": root}},
    )
    assert rewritten["content"] == "rewritten"
    assert json.loads(str(seen["content"])) == {"folder-at-start/inside": "kept too"}
