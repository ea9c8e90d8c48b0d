"""The benchmarks' own logic: the start-up guard's verdicts against its baseline, and the peers'
loops skipped when the `bench` extra is absent. (They run for real in
tests/e2e/test_benchmarks.py.)"""

import json
import sys

import pytest

from benchmarks import guard
from benchmarks.loops import PEER_MODULES, missing_peers, peer_loops


def test_the_baseline_says_when_and_at_what_load_it_was_measured() -> None:
    baseline = json.loads(guard.BASELINE.read_text())
    assert baseline["measured"] and baseline["load"] and baseline["commit"]
    for name in guard.GUARDED:
        assert baseline["ratios"][name]["cpu"] > 1


@pytest.mark.parametrize(("times_baseline", "ok"), [(1.0, True), (1.49, True), (1.51, False), (3.0, False)])
def test_the_guard_fails_a_regression_of_more_than_half(times_baseline: float, ok: bool) -> None:
    baseline = guard.baseline_ratios()
    measured = {name: (ratio * times_baseline, ratio) for name, ratio in baseline.items()}
    results = guard.verdicts(measured, baseline)
    assert [v.ok for v in results] == [ok] * len(guard.GUARDED)
    assert all(("REGRESSED" in v.line()) is not ok for v in results)


def test_the_guard_exits_1_when_a_figure_regressed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = guard.baseline_ratios()
    regressed = {
        name: (ratio * (1.6 if name == "local_pipeline_start" else 1.0), ratio)
        for name, ratio in baseline.items()
    }
    monkeypatch.setattr(guard, "measure", lambda rounds: regressed)
    assert guard.main([]) == 1
    out = capsys.readouterr().out
    assert "local_pipeline_start" in out and "REGRESSED" in out
    assert "tool_worker_import" in out.split("local_pipeline_start")[0]


def test_without_the_bench_extra_the_peers_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in PEER_MODULES.values():
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    assert missing_peers() == list(PEER_MODULES)
    assert peer_loops("http://127.0.0.1:9/v1", 3) == {}
