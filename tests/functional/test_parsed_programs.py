"""A definition parsed in one process is read back by the next (patches/speed/parsed_programs.py),
and only from a folder and a file no one but the user may write."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

from toolpipe.infra.local import user_cache
from toolpipe.infra.local.patches.speed import parsed_programs

DEFINITION = json.dumps(
    {
        "StartAt": "Add",
        "States": {
            "Add": {"Type": "Pass", "Parameters": {"sum.$": "States.MathAdd($.a, $.b)"}, "Next": "Done"},
            "Done": {"Type": "Succeed"},
        },
    }
)
PARSE = AmazonStateLanguageParser.parse


class Counted:
    """moto's parser, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, definition: str) -> tuple[Any, Any]:
        self.calls += 1
        return PARSE(definition)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(user_cache.CACHE_ENV, str(folder))
    return folder / "asl-programs"


def test_a_program_parsed_once_is_read_back_and_runs_as_parsed(cache: Path) -> None:
    first = Counted()
    program, tree = parsed_programs.through_disk(first)(DEFINITION)
    assert first.calls == 1 and tree is not None
    [written] = cache.glob("*.pickle")
    assert written.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700

    later = Counted()  # another process's parser: not asked
    read, tree = parsed_programs.through_disk(later)(DEFINITION)
    assert later.calls == 0 and tree is None
    assert type(read) is type(program) and read is not program
    # Another definition is another file.
    other = DEFINITION.replace("Done", "Finished")
    parsed_programs.through_disk(later)(other)
    assert later.calls == 1 and len(list(cache.glob("*.pickle"))) == 2


def test_the_program_read_back_runs_an_execution_in_a_fresh_process(cache: Path) -> None:
    """In a fresh interpreter, as `toolpipe run` starts a server: moto's interpreter runs the
    program read from the file (the parser is made to fail, so nothing else could run)."""
    parsed_programs.through_disk(PARSE)(DEFINITION)
    script = f"""
import json, time, boto3
from moto import mock_aws
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
def refuse(definition):
    raise AssertionError("parsed again")
AmazonStateLanguageParser.parse = staticmethod(refuse)
from toolpipe.infra.local.patches.speed import program_cache
program_cache.install()
with mock_aws(config={{"stepfunctions": {{"execute_state_machine": True}}}}):
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    arn = sfn.create_state_machine(name="m", definition={DEFINITION!r},
        roleArn="arn:aws:iam::123456789012:role/r")["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=arn, input=json.dumps({{"a": 2, "b": 3}}))
    for _ in range(200):
        run = sfn.describe_execution(executionArn=execution["executionArn"])
        if run["status"] != "RUNNING":
            break
        time.sleep(0.05)
    print(run["status"], run.get("output"))
"""
    env = {
        **os.environ,
        user_cache.CACHE_ENV: str(cache.parent),
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
    }
    ran = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    status, output = ran.stdout.split(None, 1)
    assert (status, json.loads(output)) == ("SUCCEEDED", {"sum": 5}), ran.stdout


@pytest.mark.parametrize("opened", ["file", "folder"])
def test_a_file_someone_else_may_write_is_not_read(cache: Path, opened: str) -> None:
    parsed_programs.through_disk(PARSE)(DEFINITION)
    [written] = cache.glob("*.pickle")
    (written if opened == "file" else cache).chmod(0o666 if opened == "file" else 0o777)
    again = Counted()
    parsed_programs.through_disk(again)(DEFINITION)
    assert again.calls == 1  # parsed, not read
    if opened == "folder":  # and nothing is written where others may write
        assert written.stat().st_mtime_ns == written.stat().st_mtime_ns


def test_a_file_cut_short_is_parsed_again_and_written_anew(cache: Path) -> None:
    parsed_programs.through_disk(PARSE)(DEFINITION)
    [written] = cache.glob("*.pickle")
    whole = written.read_bytes()
    written.write_bytes(whole[: len(whole) // 2])
    again = Counted()
    parsed_programs.through_disk(again)(DEFINITION)
    assert again.calls == 1 and written.read_bytes() == whole


def test_the_key_changes_with_what_shapes_the_program(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed_programs.through_disk(PARSE)(DEFINITION)
    # Another moto, Python, ANTLR runtime or patch source: another key, so parsed again.
    monkeypatch.setattr(parsed_programs, "_SHAPING", b"another build")
    again = Counted()
    parsed_programs.through_disk(again)(DEFINITION)
    assert again.calls == 1 and len(list(cache.glob("*.pickle"))) == 2


class Forgetful:
    """A component that does not come back from a pickle as it was (it drops a field)."""

    def __init__(self) -> None:
        self.kept, self.cache = 1, {"warm": True}

    def __getstate__(self) -> dict[str, Any]:
        return {"kept": self.kept}


def test_a_program_that_does_not_come_back_as_it_was_is_never_written(cache: Path) -> None:
    calls = Counted()

    def parse(definition: str) -> tuple[Any, Any]:
        calls(definition)
        return [Forgetful()], None

    for _ in range(2):
        parsed_programs.through_disk(parse)(DEFINITION)
    assert calls.calls == 2 and not list(cache.glob("*.pickle"))


def test_a_link_in_place_of_the_folder_or_the_file_is_not_followed(cache: Path, tmp_path: Path) -> None:
    """Someone who may write the cache's parent swaps in a link to a folder, or a file, of
    their choosing: it is parsed again, never read through the link."""
    parsed_programs.through_disk(PARSE)(DEFINITION)
    [written] = cache.glob("*.pickle")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / written.name).write_bytes(written.read_bytes())
    (elsewhere / written.name).chmod(0o600)
    written.unlink()
    written.symlink_to(elsewhere / written.name)  # the file a link
    again = Counted()
    parsed_programs.through_disk(again)(DEFINITION)
    assert again.calls == 1

    cache.rename(tmp_path / "moved")
    cache.symlink_to(elsewhere)  # the folder a link
    later = Counted()
    parsed_programs.through_disk(later)(DEFINITION)
    assert later.calls == 1
