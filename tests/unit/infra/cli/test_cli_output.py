"""Where the CLI's own process sends what libraries print, and what a user reads when a command breaks."""

import io
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cli import entry as cli
from toolpipe.infra.local.logfile import logs_to_file


def test_what_libraries_print_or_log_in_the_block_goes_to_the_log_file(tmp_path: Path) -> None:
    # As Powertools' Logger does: a handler bound to sys.stdout when the logger is first made.
    made_before = logging.getLogger("toolpipe-test-before")
    made_before.addHandler(before := logging.StreamHandler(sys.stdout))
    made_inside = logging.getLogger("toolpipe-test-inside")
    echo = io.StringIO()
    try:
        with logs_to_file(tmp_path, echo=echo) as path:
            made_inside.addHandler(inside := logging.StreamHandler(sys.stdout))
            made_before.warning('{"message":"run failed"}')
            made_inside.warning("made inside")
            print("printed by a library")
            logging.getLogger("moto.something").error("emulator noise")
        assert before.stream is sys.stdout and inside.stream is sys.stdout  # given back
    finally:
        made_before.removeHandler(before)
        made_inside.removeHandler(inside)

    logged = path.read_text()
    for line in ('{"message":"run failed"}', "made inside", "printed by a library"):
        assert f"{line}\n" in logged
    assert " ERROR moto.something: emulator noise\n" in logged
    assert echo.getvalue() == logged  # --verbose: the same lines on stderr too


def _broken(error: BaseException) -> Any:
    def command(args: Any, out: Any, err: Any) -> int:
        out.write("partial result\n")
        raise error

    return command


def test_an_unexpected_error_is_one_line_with_the_traceback_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "agents", _broken(RuntimeError("boom\n  with a second line")))
    out, err = io.StringIO(), io.StringIO()

    assert cli.main(["agents"], out, err) == 1

    assert err.getvalue() == (
        f"toolpipe: error: RuntimeError: boom with a second line (traceback in {tmp_path / 'toolpipe.log'})\n"
    )
    logged = (tmp_path / "toolpipe.log").read_text()
    assert "ERROR toolpipe agents: unexpected error\nTraceback (most recent call last):" in logged

    err = io.StringIO()
    assert cli.main(["agents", "--json"], out, err) == 1
    assert err.getvalue().startswith('{"error": "RuntimeError: boom with a second line (traceback in ')

    err = io.StringIO()
    assert cli.main(["agents", "--verbose"], out, err) == 1
    assert err.getvalue().startswith("Traceback (most recent call last):")  # asked for


def test_ctrl_c_exits_130_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "agents", _broken(KeyboardInterrupt()))
    err = io.StringIO()
    assert cli.main(["agents"], io.StringIO(), err) == 130
    assert err.getvalue() == "toolpipe: error: interrupted\n"


def test_the_cost_line_names_the_region_once() -> None:
    from toolpipe.infra.cli.commands.show import _cost_line

    ops = {"state_transitions": 9, "read_units": 2.5, "write_units": 4, "functions": {"api": {"requests": 3}}}
    cost: dict[str, Any] = {"total_usd": 0.01, "model_usd": 0.009, "infra_usd": 0.001, "operations": ops}
    cost["prices"] = {"source": "AWS list prices, us-east-1, on-demand, 2025", "region": "us-east-1"}
    assert _cost_line(cost) == (
        "cost: $0.010000 = model $0.009000 + AWS $0.001000 (9 state transitions · 3 Lambda invocations"
        " · 6.5 DynamoDB units; AWS list prices, us-east-1, on-demand, 2025)\n"
    )
    # A stack owner's own source that does not name its region: named after it.
    cost["prices"] = {"source": "our negotiated rates", "region": "eu-west-1"}
    assert _cost_line(cost).endswith("; our negotiated rates, eu-west-1)\n")
