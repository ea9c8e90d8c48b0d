"""Execution names: a run's first execution is the run id, each continuation `<run_id>--<n>`."""

import uuid

import pytest

from toolpipe.shared.runs.executions import execution_name, run_id_of


def test_the_first_execution_is_named_after_the_run() -> None:
    assert execution_name("abc") == "abc"
    assert run_id_of("abc") == "abc"


def test_continuations_name_the_run_and_their_number() -> None:
    run_id = uuid.uuid4().hex
    assert [execution_name(run_id, n) for n in (2, 3, 12)] == [
        f"{run_id}--2",
        f"{run_id}--3",
        f"{run_id}--12",
    ]
    assert {run_id_of(execution_name(run_id, n)) for n in range(1, 20)} == {run_id}


def test_single_dashes_in_a_run_id_are_kept() -> None:
    assert run_id_of(execution_name("a-b-c", 4)) == "a-b-c"


def test_names_that_could_not_be_read_back_are_refused() -> None:
    with pytest.raises(ValueError, match="contains '--'"):
        execution_name("a--b", 2)
    with pytest.raises(ValueError, match="below 1"):
        execution_name("a", 0)
    with pytest.raises(ValueError, match="longer than 80"):
        execution_name("x" * 79, 2)
