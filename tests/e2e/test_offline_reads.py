"""`toolpipe show`, `approvals` and `agents` on a stopped state folder read its saved state in
their own process, start no server and load no moto, and print what the running server printed
for the same state; a folder whose journal holds a crash's requests still goes to a server."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.local.client import LOCAL_CALLER, LOG_FILE, Client
from toolpipe.infra.local.scripted_model import DemoResponder, HttpError, Reply, ScriptedModelServer

ROOT = Path(__file__).resolve().parents[2]
FAILING = "this one fails"  # the model endpoint refuses it: the run fails
LONG = "answer at length"  # an answer over the record's inline limit: kept in the bucket
OTHER_CALLER = "arn:aws:iam::000000000000:user/someone-else"
# A prompt whose history item is over the table's inline limit (100 KB of JSON): its item is in
# the content bucket, so reading it back reads the snapshot's objects.
BIG_PROMPT = "What is 2 + 3? " + "é" * 60_000


def _respond(request: dict[str, Any]) -> Reply | HttpError:
    last = str(request["messages"][-1].get("content"))
    if FAILING in last:
        return HttpError(401, {"error": {"message": "Incorrect API key provided", "type": "auth"}})
    if LONG in last:
        return Reply(content="a long answer. " * 600)
    return DemoResponder()(request)


def _env(home: Path, model: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    if model is not None:
        env |= {"OPENAI_BASE_URL": model, "OPENAI_API_KEY": "scripted"}
    path = os.pathsep.join([str(ROOT), str(ROOT / "examples" / "assistant")])
    return {**env, "TOOLPIPE_HOME": str(home), "PYTHONPATH": path}


def _toolpipe(home: Path, *args: str, python: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *python, "-m", "toolpipe.infra.cli", *args],
        env=_env(home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _offline(home: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The command, and the modules it imported (`-X importtime` lines, taken out of stderr)."""
    done = _toolpipe(home, *args, python=("-X", "importtime"))
    imported = {
        line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
    }
    stderr = "".join(line + "\n" for line in done.stderr.splitlines() if not line.startswith("import time:"))
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, stderr), imported


def _wait(client: Client, run_id: str, statuses: set[str]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status, body = client.request("GET", f"/runs/{run_id}")
        if status == 200 and body["run"]["status"] in statuses:
            return
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never reached {statuses}")


def _start(client: Client, prompt: str) -> str:
    status, body = client.request("POST", "/runs", {"prompt": prompt, "agent": "assistant"})
    assert status == 202, body
    return str(body["run_id"])


class Folder:
    """A state folder with runs that succeeded, failed, wait for approval, answered at length,
    kept their prompt in the bucket, and one of another caller; what the server printed for
    each read while it ran; then stopped."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.runs: dict[str, str] = {}
        self.served: dict[tuple[str, ...], subprocess.CompletedProcess[str]] = {}

    def reads(self) -> list[tuple[str, ...]]:
        return [
            *(("show", run_id, "--json") for run_id in self.runs.values()),
            ("approvals", "--json"),
            ("approvals", "--status", "all", "--json"),
            ("approvals",),
            ("show", "0" * 32),
            ("agents",),
            ("agents", "--json"),
        ]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Folder]:
    home = tmp_path_factory.mktemp("offline") / "state"
    made = Folder(home)
    with ScriptedModelServer(_respond) as model:
        serve = subprocess.Popen(
            [sys.executable, "-m", "toolpipe.infra.cli", "serve", "--port", "0", "--json"],
            env=_env(home, model.base_url),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert serve.stdout is not None
            ready = serve.stdout.readline()
            assert ready, f"serve exited {serve.wait()}"
            client = Client(json.loads(ready)["url"])
            made.runs = {
                "succeeded": _start(client, "What is 2 + 3?"),
                "failed": _start(client, FAILING),
                "waiting": _start(client, "Email ana@example.com saying the report is ready"),
                "long": _start(client, LONG),
                "big": _start(client, BIG_PROMPT),
            }
            theirs = _start(
                Client(json.loads(ready)["url"], caller=OTHER_CALLER), "Email bo@example.com saying hi"
            )
            for name, run_id in made.runs.items():
                if name != "waiting":  # that one waits for its approval, below
                    _wait(client, run_id, {"failed"} if name == "failed" else {"succeeded"})
            _wait_for_approvals(client, 1)
            _wait_for_approvals(Client(json.loads(ready)["url"], caller=OTHER_CALLER), 1)
            made.runs["theirs"] = theirs
            for read in made.reads():
                made.served[read] = _toolpipe(home, *read)
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.communicate(timeout=60)
    assert serve.returncode == 0
    yield made


def _wait_for_approvals(client: Client, count: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status, body = client.request("GET", "/approvals?status=pending")
        if status == 200 and len(body["approvals"]) >= count:
            return
        time.sleep(0.1)
    raise AssertionError("the approval never came")


def _comparable(read: tuple[str, ...], stdout: str) -> Any:
    """What a read printed, less what only a running server can give (the module docstring of
    infra/cli/offline.py): approval links, and presigned URLs (signed anew at each read)."""
    if "--json" not in read or not stdout:  # a refusal (another caller's run) prints nothing
        return stdout
    document = json.loads(stdout)
    for approval in document.get("approvals", []):
        approval["callback_url"] = None
    run = document.get("run", {})
    if "output_url" in run:
        run["output_url"] = "<url>"
    return document


def test_reads_of_a_stopped_folder_print_what_the_server_printed(folder: Folder) -> None:
    log = (folder.home / LOG_FILE).read_bytes()
    for read in folder.reads():
        served = folder.served[read]
        offline, imported = _offline(folder.home, *read)
        assert (offline.returncode, offline.stderr) == (served.returncode, served.stderr), read
        assert _comparable(read, offline.stdout) == _comparable(read, served.stdout), read
        # No server was started, nor moto (nor boto3) loaded: the saved state was read here.
        assert not {"moto", "boto3"} & imported or read[0] == "agents", read
        assert "moto" not in imported, read
    assert not (folder.home / "server.json").exists()
    assert (folder.home / LOG_FILE).read_bytes() == log  # no server wrote its banner


def test_each_kind_of_run_is_there_and_whole(folder: Folder) -> None:
    """The reads compared above are of the runs asked for, read whole from the bucket too."""
    shown = {
        name: json.loads(_toolpipe(folder.home, "show", run_id, "--json").stdout)
        for name, run_id in folder.runs.items()
        if name != "theirs"
    }
    assert shown["succeeded"]["run"]["status"] == "succeeded"
    assert shown["failed"]["run"]["status"] == "failed"
    assert shown["waiting"]["run"]["status"] == "running"
    # The long answer's whole text is in the bucket: its record names where, not a dead link.
    assert shown["long"]["run"]["output_url"].startswith("s3://")
    # The prompt kept in the bucket is read back from the snapshot's objects, as a preview.
    first = shown["big"]["messages"][0]
    assert first["content"].startswith("What is 2 + 3? éé") and first["truncated"] == {"content": 60_015}
    assert _toolpipe(folder.home, "approvals", "--json").stdout.count('"approval_id"') == 1


def test_a_run_of_another_caller_is_not_found_offline_either(folder: Folder) -> None:
    theirs = folder.runs["theirs"]
    offline = _toolpipe(folder.home, "show", theirs)
    assert offline.returncode == 1
    assert offline.stderr.splitlines()[-1] == f"toolpipe: error: run {theirs} not found"
    listed = json.loads(_toolpipe(folder.home, "approvals", "--status", "all", "--json").stdout)
    assert {a["run_id"] for a in listed["approvals"]} == {folder.runs["waiting"]}
    assert all(a["requester"] == LOCAL_CALLER for a in listed["approvals"])


def test_a_folder_left_by_a_crash_is_read_by_a_server_which_replays_its_journal(
    folder: Folder, tmp_path: Path
) -> None:
    crashed = tmp_path / "crashed"
    shutil.copytree(folder.home, crashed)
    # A request journaled after the last snapshot, as kill -9 leaves it: the snapshot is not the
    # whole state, so reading it alone could miss a run.
    with (crashed / "journal.jsonl").open("a") as journal:
        item = {"pk": {"S": "NOTE#crash"}, "sk": {"S": "NOTE"}}
        journal.write(
            json.dumps({"ddb": "PutItem", "p": {"TableName": "toolpipe-local", "Item": item}}) + "\n"
        )
    log = (crashed / LOG_FILE).read_bytes()
    run_id = folder.runs["succeeded"]

    shown = _toolpipe(crashed, "show", run_id, "--json")

    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run"]["status"] == "succeeded"
    assert (crashed / LOG_FILE).read_bytes() != log  # a server started, and said so in its log
    # The run waiting for approval does not keep it up (issue 33): it stops by itself once
    # nothing runs; stopped, it has folded the journal into the snapshot, and the next read
    # needs no server.
    deadline = time.monotonic() + 60
    while (crashed / "server.json").exists() or _locked(crashed):
        assert time.monotonic() < deadline, "the server did not stop"
        time.sleep(0.05)
    assert len((crashed / "journal.jsonl").read_text().splitlines()) == 1
    again, imported = _offline(crashed, "show", run_id, "--json")
    assert again.returncode == 0 and "moto" not in imported


def _locked(home: Path) -> bool:
    from toolpipe.infra.cli.discovery import lock_is_held

    return lock_is_held(home)


def test_a_folder_with_no_state_or_a_damaged_one_says_so_in_one_line(tmp_path: Path) -> None:
    missing = _toolpipe(tmp_path / "nowhere", "show", "0" * 32)
    assert missing.returncode == 1
    # One line (after the line naming the state folder, where the CLI prints one).
    assert missing.stderr.splitlines()[-1].startswith("toolpipe: error: no runs here: ")
    assert "Traceback" not in missing.stderr
    assert not (tmp_path / "nowhere").exists()  # nothing made, no server started there
    for command in (("approvals",), ("show", "0" * 32)):
        last = _toolpipe(tmp_path / "nowhere", *command).stderr.splitlines()[-1]
        assert last.startswith("toolpipe: error: no runs here: ")

    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "state.json").write_text('{"generation": 3, "items": [')
    (damaged / "journal.jsonl").write_text('{"generation": 3}\n')
    read = _toolpipe(damaged, "show", "0" * 32)
    assert read.returncode == 1
    assert read.stderr.splitlines()[-1].startswith("toolpipe: error: cannot read the saved state: ")
    assert "Traceback" not in read.stderr
    assert not (damaged / LOG_FILE).exists()
