"""An AWS data file botocore decoded in one process is read back by the next
(patches/speed/model_files.py): equal to the JSON, in the same order, never running code a file
planted in the cache holds, and only from a folder no one but the user may write."""

import gzip
import json
import os
import pickle
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from botocore.loaders import JSONFileLoader, Loader

from toolpipe.infra.local import user_cache
from toolpipe.infra.local.patches.speed import model_files, parsed_programs


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(user_cache.CACHE_ENV, str(folder))
    monkeypatch.setattr(JSONFileLoader, "_load_file", model_files._load_file)
    return folder / "aws-models"


def _decoded(path: str) -> Any:
    """What botocore itself decodes from the file."""
    return model_files._original(JSONFileLoader(), path, gzip.open if path.endswith(".gz") else open)


def _dynamodb_file() -> str:
    loader = Loader()
    version = loader.determine_latest_version("dynamodb", "service-2")
    for directory in loader.search_paths:
        for ext in (".json.gz", ".json"):
            path = os.path.join(directory, "dynamodb", version, "service-2" + ext)
            if os.path.isfile(path):
                return path
    raise AssertionError("no DynamoDB model found")


def test_a_file_decoded_once_is_read_back_equal_and_in_order(cache: Path) -> None:
    path = _dynamodb_file()
    opener = gzip.open if path.endswith(".gz") else open
    first = JSONFileLoader()._load_file(path, opener)
    [written] = cache.glob("*.pickle")
    assert written.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    expected = _decoded(path)
    again = JSONFileLoader()._load_file(path, opener)
    assert again == expected == first and again is not first  # new objects each time
    # Plain dicts, in the JSON's order: unpickled in C, where an `OrderedDict` is rebuilt in Python.
    assert type(again) is dict and list(again["shapes"]) == list(expected["shapes"])
    assert type(again["shapes"]) is dict and list(again) == list(expected)
    # The whole model, through a botocore loader: what a client is made from.
    assert Loader().load_service_model("dynamodb", "service-2") == json.loads(
        json.dumps(expected), object_pairs_hook=OrderedDict
    )


def test_a_planted_file_runs_no_code_and_the_json_is_decoded_instead(cache: Path, tmp_path: Path) -> None:
    path = _dynamodb_file()
    opener = gzip.open if path.endswith(".gz") else open
    JSONFileLoader()._load_file(path, opener)
    [written] = cache.glob("*.pickle")
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    written.write_bytes(pickle.dumps({"shapes": Payload()}))
    written.chmod(0o600)
    read = JSONFileLoader()._load_file(path, opener)
    assert not marker.exists()
    assert read == _decoded(path)
    assert model_files.plain_loads(written.read_bytes()) == read  # written anew, plain


@pytest.mark.parametrize("opened", ["file", "folder"])
def test_a_file_someone_else_may_write_is_not_read(cache: Path, opened: str) -> None:
    path = _dynamodb_file()
    opener = gzip.open if path.endswith(".gz") else open
    JSONFileLoader()._load_file(path, opener)
    [written] = cache.glob("*.pickle")
    written.write_bytes(pickle.dumps({"planted": True}))  # plain data: only the mode refuses it
    (written if opened == "file" else cache).chmod(0o666 if opened == "file" else 0o777)
    assert JSONFileLoader()._load_file(path, opener) == _decoded(path)


def test_a_missing_file_is_none_as_botocore_says(cache: Path, tmp_path: Path) -> None:
    assert JSONFileLoader()._load_file(str(tmp_path / "absent.json"), open) is None
    assert not cache.exists()


def test_a_runtime_started_in_a_fresh_process_reads_the_models_back(tmp_path: Path) -> None:
    """Two processes: the first writes the cache, the second starts a runtime from it and runs
    a call through a client (the models read back are the ones the clients are made from)."""
    script = (
        "import os; os.environ['POWERTOOLS_LOG_LEVEL'] = 'ERROR'\n"
        "from toolpipe.infra.local.runtime import LocalRuntime\n"
        "with LocalRuntime(extra_env={'OPENAI_BASE_URL': 'http://127.0.0.1:9/v1', 'OPENAI_API_KEY': 'x'}) as rt:\n"
        "    print(len(rt.sqs.list_queues()['QueueUrls']))\n"
    )
    env = {**os.environ, user_cache.CACHE_ENV: str(tmp_path / "cache")}
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True) for _ in "ab"
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout and int(runs[1].stdout) >= 2
    assert len(list((tmp_path / "cache" / "aws-models").glob("*.pickle"))) >= 10


def test_a_user_with_no_home_reads_the_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HOME and no entry in the password database: nothing cached, nothing broken."""
    import pwd

    for name in (user_cache.CACHE_ENV, "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid: int) -> Any:
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setattr(JSONFileLoader, "_load_file", model_files._load_file)
    assert user_cache.folder() is None and parsed_programs._path('{"StartAt": "A"}') is None
    path = _dynamodb_file()
    assert JSONFileLoader()._load_file(path, gzip.open if path.endswith(".gz") else open) == _decoded(path)
