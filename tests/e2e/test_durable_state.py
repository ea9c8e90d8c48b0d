"""Local state survives the end of the server process, kill -9 included, and runs go on after it."""

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from botocore.awsrequest import AWSPreparedRequest
from botocore.compat import HTTPHeaders

from toolpipe.infra.local import persistence, recovery
from toolpipe.infra.local.runtime import BUCKET, TABLE, LocalRuntime
from toolpipe.shared.history.store import DynamoHistoryStore
from toolpipe.shared.messages import RunRecord, RunStatus, UserMessage

ROOT = Path(__file__).resolve().parents[2]
COUNTER = {"pk": {"S": "test"}, "sk": {"S": "counter"}}


class Server:
    """One local server process (`tests/e2e/durable_app.py`), read line by line as it prints."""

    def __init__(self, tmp: Path, mode: str, *args: str, tool_seconds: float) -> None:
        self._stderr = (tmp / f"{mode}-{time.monotonic_ns()}.err").open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.e2e.durable_app",
                mode,
                str(tmp / "state"),
                str(tmp / "marks"),
                *args,
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "TOOL_SECONDS": str(tool_seconds)},
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line.rstrip("\n"))

    def wait_for(self, *wanted: str, timeout: float = 60) -> dict[str, str]:
        """Wait until a line starting with each of `wanted` was printed; those lines."""
        deadline, seen = time.monotonic() + timeout, {}
        while len(seen) < len(wanted):
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {wanted} after {timeout} s; stderr:\n{self._errors()}") from None
            seen |= {w: line for w in wanted if line.startswith(w)}
        return seen

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._stderr.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self._stderr.close()

    def _errors(self) -> str:
        self._stderr.flush()
        return Path(self._stderr.name).read_text()[-3000:]


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.close()


def _wait_until_journaled(tmp: Path, *needles: str, timeout: float = 30) -> None:
    """Wait until one journal line holds every needle: the write is then durable. The journal
    is the only sign of it the server process gives."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = (tmp / "state" / persistence.JOURNAL).read_text().splitlines()
        if any(all(n in line for n in needles) for line in lines):
            return
        time.sleep(0.02)
    raise AssertionError(f"no journal line with {needles} after {timeout} s")


def _marks(tmp: Path) -> Counter[str]:
    return Counter((tmp / "marks").read_text().splitlines())


def test_a_run_survives_two_kills_in_a_row_and_no_tool_runs_twice_silently(
    tmp_path: Path, servers: list[Server]
) -> None:
    # One turn, three calls: `quick` ends before the kill, `charge_card` (not idempotent) and
    # `fetch_page` (idempotent) are running when the process is killed.
    first = Server(tmp_path, "start", "durable", tool_seconds=30)
    servers.append(first)
    run_id = first.wait_for("run ")["run "].split()[1]
    first.wait_for("mark start charge_card", "mark start fetch_page", "mark end quick")
    _wait_until_journaled(tmp_path, "CALL#000003", '"DONE"')  # quick's outcome is stored
    first.kill()

    # Killed again while the resumed, idempotent call runs once more.
    second = Server(tmp_path, "serve", tool_seconds=30)
    servers.append(second)
    ready = second.wait_for("ready ")["ready "]
    assert json.loads(ready.split(" ", 1)[1]) == [run_id]
    second.wait_for("mark start fetch_page")
    second.kill()

    third = Server(tmp_path, "finish", run_id, tool_seconds=0.1)
    servers.append(third)
    body = json.loads(third.wait_for("result ")["result "].split(" ", 1)[1])
    assert third.proc.wait(timeout=30) == 0

    run = body["run"]
    assert run["status"] == "succeeded", run
    assert run["execution"] == 3  # <run_id>, then one fresh execution per restart
    assert [m["kind"] for m in body["messages"]] == ["user", "assistant", *["tool_result"] * 3, "assistant"]
    assert [m["seq"] for m in body["messages"]] == [1, 2, 3, 4, 5, 6]
    results = {e["tool"]: e for e in body["executions"]}
    assert results["quick"]["status"] == "ok"  # answered before the kill, kept
    assert results["charge_card"]["error_type"] == "InDoubt"  # may have charged: not charged again
    assert results["fetch_page"]["result"] == "fetched u"  # safe to repeat: repeated until it ended
    marks = _marks(tmp_path)
    assert marks["start quick"] == 1
    assert (marks["start charge_card"], marks["end charge_card"]) == (1, 0)
    assert (marks["start fetch_page"], marks["end fetch_page"]) == (3, 1)
    assert "may or may not have taken effect" in run["output"]


def test_a_resumed_run_killed_mid_call_runs_nothing_twice_and_its_cut_call_stays_in_doubt(
    tmp_path: Path, servers: list[Server]
) -> None:
    # The run ends `limit` after `quick`; the resume raises the limit and the next turn's calls
    # start: `charge_card` (not idempotent) and `fetch_page` (idempotent) run when the kill comes.
    first = Server(tmp_path, "resume", "stepwise", tool_seconds=30)
    servers.append(first)
    run_id = first.wait_for("run ")["run "].split()[1]
    assert first.wait_for("ended ")["ended "] == "ended limit"
    first.wait_for("resumed ", "mark start charge_card", "mark start fetch_page")
    first.kill()

    second = Server(tmp_path, "finish", run_id, tool_seconds=0.1)
    servers.append(second)
    body = json.loads(second.wait_for("result ")["result "].split(" ", 1)[1])
    assert second.proc.wait(timeout=30) == 0

    run = body["run"]
    assert run["status"] == "succeeded", run
    assert run["execution"] == 3  # the run's first, the resume's, the restart's
    assert [r["execution"] for r in run["resumes"]] == [2]
    results = {e["tool"]: e for e in body["executions"]}
    assert results["quick"]["result"] == "quick a"  # done before the resume: kept, never run again
    assert results["charge_card"]["error_type"] == "InDoubt"  # may have charged: not charged again
    assert results["fetch_page"]["result"] == "fetched u"
    marks = _marks(tmp_path)
    assert marks["start quick"] == 1
    assert (marks["start charge_card"], marks["end charge_card"]) == (1, 0)
    assert marks["end fetch_page"] == 1


def test_a_fork_killed_mid_call_reruns_no_copied_call_and_its_cut_call_stays_in_doubt(
    tmp_path: Path, servers: list[Server]
) -> None:
    # The run fails after turn 1 (`quick` done, `refuse` failed); its fork from turn 1 goes on and
    # starts `charge_card` and `fetch_page`, which run when the kill comes.
    first = Server(tmp_path, "fork", "forky", tool_seconds=30)
    servers.append(first)
    run_id = first.wait_for("run ")["run "].split()[1]
    assert first.wait_for("ended ")["ended "] == "ended failed"
    fork_id = first.wait_for("fork ")["fork "].split()[1]
    first.wait_for("mark start charge_card", "mark start fetch_page")
    first.kill()

    second = Server(tmp_path, "finish", fork_id, tool_seconds=0.1)
    servers.append(second)
    body = json.loads(second.wait_for("result ")["result "].split(" ", 1)[1])
    assert second.proc.wait(timeout=30) == 0

    run = body["run"]
    assert run["status"] == "succeeded", run
    assert run["forked_from"] == {"run_id": run_id, "turn": 1}
    results = {e["tool"]: e for e in body["executions"]}
    assert results["quick"]["result"] == "quick a"  # copied from the run, never run again
    assert results["charge_card"]["error_type"] == "InDoubt"
    assert results["fetch_page"]["result"] == "fetched u"
    marks = _marks(tmp_path)
    assert marks["start quick"] == 1
    assert (marks["start charge_card"], marks["end charge_card"]) == (1, 0)


def test_a_child_run_and_its_parent_both_go_on_after_a_kill(tmp_path: Path, servers: list[Server]) -> None:
    first = Server(tmp_path, "start", "boss", tool_seconds=30)
    servers.append(first)
    run_id = first.wait_for("run ")["run "].split()[1]
    first.wait_for("mark start fetch_page", "mark start charge_card")  # the child's calls
    first.kill()

    second = Server(tmp_path, "finish", run_id, tool_seconds=0.1)
    servers.append(second)
    ready = json.loads(second.wait_for("ready ")["ready "].split(" ", 1)[1])
    body = json.loads(second.wait_for("result ")["result "].split(" ", 1)[1])

    assert len(ready) == 2 and run_id in ready  # the parent and its child
    assert body["run"]["status"] == "succeeded", body["run"]
    # The parent's call got the child's answer, which was made after the restart.
    (delegated,) = body["executions"]
    assert delegated["status"] == "ok"
    assert "fetched u" in delegated["result"] and "may or may not have taken effect" in delegated["result"]
    assert _marks(tmp_path)["start charge_card"] == 1


# --- the files on disk, in-process (a copy of the state directory taken while the runtime
# is open is exactly what kill -9 would leave: every write() already returned) -----------------


def _add(runtime: LocalRuntime, times: int) -> None:
    for _ in range(times):
        runtime.dynamodb.update_item(
            TableName=TABLE,
            Key=COUNTER,
            UpdateExpression="ADD n :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )


def _counter(runtime: LocalRuntime) -> int:
    item = runtime.dynamodb.get_item(TableName=TABLE, Key=COUNTER).get("Item")
    return int(item["n"]["N"]) if item else 0


def _crashed_copy(tmp: Path, writes: int) -> Path:
    """A state directory as kill -9 leaves it after `writes` increments and one object."""
    with LocalRuntime(state_dir=tmp / "live", workers=0) as runtime:
        _add(runtime, writes)
        runtime.s3.put_object(Bucket=BUCKET, Key="runs/x/out.txt", Body=b"\x00binary\xff")
        shutil.copytree(tmp / "live", tmp / "crashed")
    return tmp / "crashed"


def test_a_kill_loses_nothing_and_replays_each_write_once(tmp_path: Path) -> None:
    crashed = _crashed_copy(tmp_path, writes=3)
    with LocalRuntime(state_dir=crashed, workers=0) as runtime:
        assert _counter(runtime) == 3
        assert runtime.s3.get_object(Bucket=BUCKET, Key="runs/x/out.txt")["Body"].read() == b"\x00binary\xff"
        assert runtime.restored.journal_lines == 4
        _add(runtime, 1)
    with LocalRuntime(state_dir=crashed, workers=0) as runtime:  # a clean exit folded it all in
        assert _counter(runtime) == 4
        assert runtime.restored.journal_lines == 0


def test_a_torn_last_journal_line_is_ignored(tmp_path: Path) -> None:
    crashed = _crashed_copy(tmp_path, writes=2)
    with (crashed / persistence.JOURNAL).open("ab") as journal:
        journal.write(b'{"ddb":"UpdateItem","p":{"TableName": "toolpipe-lo')  # cut short by the kill
    with LocalRuntime(state_dir=crashed, workers=0) as runtime:
        assert _counter(runtime) == 2
        assert runtime.restored.torn_lines == 1


def test_a_snapshot_write_interrupted_midway_leaves_the_previous_one_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_replace = persistence._replace

    def dies_halfway(path: Path, text: str) -> None:
        if path.name == persistence.SNAPSHOT:
            path.with_name(path.name + ".tmp").write_text(text[: len(text) // 2])
            raise OSError("killed while writing the snapshot")
        real_replace(path, text)

    with (
        pytest.raises(OSError, match="killed while writing"),
        LocalRuntime(state_dir=tmp_path, workers=0) as runtime,
    ):
        _add(runtime, 2)
        monkeypatch.setattr(persistence, "_replace", dies_halfway)
    monkeypatch.setattr(persistence, "_replace", real_replace)
    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        assert _counter(runtime) == 2


def test_a_kill_between_the_new_snapshot_and_the_new_journal_applies_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_replace = persistence._replace

    def dies_after_the_snapshot(path: Path, text: str) -> None:
        if path.name == persistence.JOURNAL:
            raise OSError("killed after the snapshot")
        real_replace(path, text)

    with pytest.raises(OSError, match="killed after"), LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        _add(runtime, 2)
        monkeypatch.setattr(persistence, "_replace", dies_after_the_snapshot)
    monkeypatch.setattr(persistence, "_replace", real_replace)
    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        assert _counter(runtime) == 2  # not 4: the old journal is in the new snapshot already
        assert runtime.restored.journal_lines == 0


def test_a_long_journal_is_folded_into_a_snapshot_while_serving(tmp_path: Path) -> None:
    crashed = tmp_path / "crashed"
    with LocalRuntime(state_dir=tmp_path / "live", workers=0) as runtime:
        assert runtime._durable is not None
        runtime._durable.compact_after_lines = 5
        _add(runtime, 12)
        assert len((tmp_path / "live" / persistence.JOURNAL).read_text().splitlines()) == 1 + 2
        shutil.copytree(tmp_path / "live", crashed)
    with LocalRuntime(state_dir=crashed, workers=0) as runtime:
        assert _counter(runtime) == 12
        assert runtime.restored.journal_lines == 2


def test_a_second_process_on_the_same_state_is_refused(tmp_path: Path) -> None:
    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        other = persistence.DurableState(tmp_path, runtime.dynamodb, runtime.s3, TABLE, BUCKET)
        with pytest.raises(persistence.StateDirInUseError, match=f"in use by process {os.getpid()}"):
            other.open()


def _put_run(runtime: LocalRuntime, record: RunRecord) -> None:
    import boto3

    store = DynamoHistoryStore(boto3.resource("dynamodb").Table(TABLE), runtime.s3, BUCKET)
    assert store.create_run(record, UserMessage(seq=1, turn=0, content="hi"))


def test_a_running_run_that_cannot_go_on_ends_with_the_reason(tmp_path: Path) -> None:
    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        _put_run(runtime, RunRecord(run_id="ghostrun", agent="retired-agent", status=RunStatus.RUNNING))
    with LocalRuntime(state_dir=tmp_path, workers=1) as runtime:
        assert runtime.resumed == []
        item = runtime.dynamodb.get_item(
            TableName=TABLE, Key={"pk": {"S": "RUN#ghostrun"}, "sk": {"S": "META"}}
        )
        assert item["Item"]["status"]["S"] == "failed"
        assert item["Item"]["error"]["S"].startswith(recovery.RESTART_FAILURE)
        assert "retired-agent" in item["Item"]["error"]["S"]


def test_a_viewer_without_workers_resumes_nothing(tmp_path: Path) -> None:
    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        _put_run(runtime, RunRecord(run_id="waiting", agent="tester", status=RunStatus.RUNNING))
    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        assert runtime.resumed == []
        assert runtime.sfn.list_executions(stateMachineArn=runtime.state_machine_arn)["executions"] == []


def test_the_journal_costs_well_under_a_millisecond_a_write(tmp_path: Path) -> None:
    """The figure: what journaling adds to one PutItem (recognise it, build the line, write()),
    timed on its own; a whole request in moto takes ~1-3 ms here, too noisy to subtract from."""
    writes = 2000
    body = json.dumps(
        {"TableName": TABLE, "Item": {"pk": {"S": "cost"}, "sk": {"S": "x" * 20}, "v": {"S": "x" * 500}}}
    )
    headers = HTTPHeaders()
    headers["X-Amz-Target"] = "DynamoDB_20120810.PutItem"
    request = AWSPreparedRequest(
        method="POST",
        url="https://dynamodb.us-east-1.amazonaws.com/",
        headers=headers,
        body=body.encode(),
        stream_output=False,
    )
    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        durable = runtime._durable
        assert durable is not None
        durable.compact_after_lines = writes + 1
        start = time.perf_counter()
        for _ in range(writes):
            done = durable._observe(request)
            assert done is not None
            done(200)
        per_write_ms = (time.perf_counter() - start) / writes * 1000
        journaled = (tmp_path / persistence.JOURNAL).read_text().splitlines()
    print(f"\njournal cost per write: {per_write_ms * 1000:.1f} µs")
    assert len(journaled) == 1 + writes and json.loads(journaled[-1])["p"]["Item"]["v"]["S"] == "x" * 500
    assert per_write_ms < 0.5
