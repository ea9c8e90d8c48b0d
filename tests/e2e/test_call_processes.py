"""Each tool call in a process of its own (issue 32): what one call leaves (patched modules,
threads, processes, files, environment) never reaches another call, of any run; a tool reads
no model key; the IAM check is not in the tool's process to skip. Through `LocalPipeline` with
an app module, as a user tests their agents."""

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.process_app import secret
from toolpipe.infra.local.runtime import TABLE
from toolpipe.testing import LocalPipeline, Reply, call, read_run

APP = "tests.e2e.process_app"


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalPipeline]:
    monkeypatch.setenv("OPENAI_API_KEY", secret())  # the developer's key, as their shell has it
    with LocalPipeline(app=APP) as pipeline:
        yield pipeline


def _one(pipeline: LocalPipeline, tool: str, **arguments: object) -> str:
    pipeline.script(Reply(tool_calls=[call(tool, **arguments)]), Reply(content="done"))
    run = pipeline.run(f"call {tool}", agent="prober")
    assert run.status == "succeeded", run.error
    return run.tool_results[0]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_what_a_call_leaves_never_reaches_a_later_call_of_another_run(
    pipeline: LocalPipeline, tmp_path: Path
) -> None:
    log = tmp_path / "writes.log"
    left = json.loads(_one(pipeline, "tamper", log=str(log)))
    time.sleep(0.3)  # anything still alive would write again by now
    size = log.stat().st_size
    time.sleep(0.5)

    # Its thread, its raw thread, its own-session process and its re-parented grandchild ended
    # with the call: nothing writes any more.
    assert log.stat().st_size == size
    assert {"thread", "raw-thread", "process"} <= set(log.read_text().split())
    assert not _alive(left["pid"]) and not _alive(left["child"])
    assert not Path(left["cwd"]).exists()  # its folder is gone

    seen = json.loads(_one(pipeline, "look"))
    assert seen["pid"] != left["pid"] and seen["pid"] != os.getpid()
    assert seen["cwd"] != left["cwd"] and seen["cwd_files"] == []
    assert seen["json_dumps_forged"] is False and seen["execute_forged"] is False
    assert seen["left_env"] is None
    assert all(not name.startswith("Thread-") for name in seen["threads"]), seen["threads"]


def test_a_tool_reads_no_model_key_and_no_state_folder(pipeline: LocalPipeline) -> None:
    seen = json.loads(_one(pipeline, "look"))
    assert seen["secret_in"] == []
    assert seen["model_names"] == [] and seen["home"] is None
    assert os.getpid() != seen["pid"]


def test_the_iam_check_is_not_in_the_tools_process_to_skip(pipeline: LocalPipeline) -> None:
    said = _one(pipeline, "act_as_the_pipeline", token="AAAA" * 16)
    # The runner's role may not answer task tokens: refused as AWS refuses it, made by the
    # runtime as the runner; the emulator is not in the tool's process at all.
    assert said == "AccessDeniedException no-emulator"


def test_a_call_whose_process_dies_is_an_error_and_the_next_call_runs(pipeline: LocalPipeline) -> None:
    assert _one(pipeline, "exit_hard", code=3) == (
        "Error: Tool 'exit_hard' failed: its process exited with status 3 before answering."
    )
    assert _one(pipeline, "kill_the_template") == "killed"
    # The template it was forked from is gone: the next call gets a new one.
    assert json.loads(_one(pipeline, "look"))["json_dumps_forged"] is False


def test_a_calls_output_is_capped_in_the_log(
    pipeline: LocalPipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _one(pipeline, "shout", megabytes=20) == "shouted"
    printed = capsys.readouterr().out
    assert printed.count("y" * 1023) == 64  # 64 KiB of 20 MB
    assert "(toolpipe: the call printed 20,971,520 bytes; the first 65,536 are kept)" in printed
    assert len(printed) < 70_000


def test_an_app_named_for_one_pipeline_leaves_no_agent_behind() -> None:
    """`LocalPipeline(app=...)` names the app for its own length: its agents too (a later test of
    the same process lists the agents it knows)."""
    from toolpipe.shared.agents import AGENTS, all_agents

    before = sorted(agent.name for agent in all_agents())
    with LocalPipeline(app=APP):
        assert "prober" in {agent.name for agent in all_agents()} and "prober" in AGENTS
    assert sorted(agent.name for agent in all_agents()) == before and "prober" not in before


def _file_run(pipeline: LocalPipeline, key: str, body: bytes) -> str:
    """Put a file under the trigger prefix: the id of the run it starts, once it has ended."""
    runtime = pipeline.runtime

    def runs() -> set[str]:
        items = runtime.dynamodb.scan(TableName=TABLE)["Items"]
        return {item["run_id"]["S"] for item in items if item.get("sk", {}).get("S") == "META"}

    before = runs()
    runtime.s3.put_object(Bucket=runtime.trigger_bucket, Key=key, Body=body)
    deadline = time.monotonic() + 30
    while True:
        started = runs() - before
        if started:
            [run_id] = started
            runtime.wait_for_execution(run_id, 30)
            return run_id
        assert time.monotonic() < deadline, "no run started"
        time.sleep(0.05)


def test_a_tool_reads_its_own_runs_input_and_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLPIPE_TRIGGER_AGENT", "prober")  # files start runs of the prober
    with LocalPipeline(app=APP) as pipeline:
        _reads_only_its_own(pipeline)


def _reads_only_its_own(pipeline: LocalPipeline) -> None:
    # Run B: a file of someone else's, its run ended.
    pipeline.script(Reply(content="filed"))
    _file_run(pipeline, "inbox/b-payroll.txt", b"B's payroll")
    # Run A: its tool knows B's key and holds a link to its own file.
    pipeline.script(
        Reply(tool_calls=[call("read_another_input", key="inbox/b-payroll.txt")]),
        Reply(tool_calls=[call("read_input")]),
        Reply(content="done"),
    )
    run_id = _file_run(pipeline, "inbox/a-note.txt", b"A's note")
    results = [
        m["content"] for m in read_run(pipeline.runtime, run_id)["messages"] if m["kind"] == "tool_result"
    ]
    seen = json.loads(results[0])
    # The runner's role reads no input: refused as S3 refuses it (403 without ListBucket).
    assert seen["direct"] == "AccessDenied"
    # Its link read its own file; edited, or signed by anything a tool could sign with, refused.
    assert seen.pop("own") == "A's note"
    assert {name: code for name, code in seen.items() if name != "direct"} == {
        "edited": 403,
        "signed:FOOBARSECRET": 403,
        "signed:local": 403,
        "signed:tool-runner": 403,
    }
    assert results[1] == "[bytes 0-7 of 8; end of file]\nA's note"


def test_a_run_not_started_by_a_file_gives_its_tools_no_link(pipeline: LocalPipeline) -> None:
    said = json.loads(_one(pipeline, "read_another_input", key="inbox/b-payroll.txt"))
    assert said == {"link": None, "source": False}


def test_a_tool_cannot_call_aws_as_another_runner_through_its_socket(pipeline: LocalPipeline) -> None:
    """The "mail" runner's broker makes calls as that runner: its socket's path is no secret, but
    only that runner's calls are answered there (a tool of the default runner is not)."""
    processes = pipeline.runtime._tool_processes
    assert processes is not None
    [mail] = [broker.path for broker in processes._brokers if broker.context.name == "tool_runner_mail"]
    said = _one(pipeline, "send_through", broker=mail)
    assert said in {"closed", "ConnectionResetError", "BrokenPipeError"}, said
    # Its own runner's broker still answers it (and refuses the mail: not its grant).
    own = [broker.path for broker in processes._brokers if broker.context.name == "tool_runner"]
    assert "AccessDenied" in _one(pipeline, "send_through", broker=own[0])


def test_the_template_is_not_dumpable_while_it_imports_the_app(pipeline: LocalPipeline) -> None:
    assert _one(pipeline, "dumpable") == "0 0"
