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
from toolpipe.testing import LocalPipeline, Reply, call

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
