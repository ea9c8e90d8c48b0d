"""What a process per tool call costs (issue 32), beside running the call in the runner's own
process as the runner did before, measured in one run:

    python -m benchmarks.calls              # 8 rounds of 25 calls of each way, interleaved
    python -m benchmarks.calls --quick      # seconds: one round of 5 (make test runs it)

- in process: `run_tool_call` in this process (the runner before issue 32);
- forked (deployed): `CallProcesses.forked`, the template forked from this process after the app
  is imported, as the runner's Lambda does at its cold start;
- fresh template: `CallProcesses.spawned`, a fresh interpreter with the app imported, as the
  local runtime's template of each runner function is (or is forked to be: below).

Each call is the example's `square_root` (no I/O): what is measured is the process per call.
Reported: the median and p95 wall time per call, the median added to the in-process call, the
template's resident memory, and the load average.

Then a local runner's template's start, alternately the two ways the local runtime can start
one: a fresh interpreter (`call_runner.spawn`) and forked from the fork server
(`infra/local/fork_server.py`, Linux): the wall time until it is ready and the template's own
CPU then, medians; the server's own start, once per process, is reported apart.
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from toolpipe.shared.messages import ToolCall
from toolpipe.shared.runs import call_process, call_runner
from toolpipe.shared.runs.call_host import prepare
from toolpipe.shared.runs.tool_run import ToolRunRequest, run_tool_call

APP = "assistant.agents"


@dataclass
class Way:
    name: str
    run: "call_runner.CallProcesses | None"
    samples: list[float]


def _request() -> ToolRunRequest:
    return ToolRunRequest(
        run_id="bench",
        agent="assistant",
        call=ToolCall(id="c", name="square_root", arguments='{"x": 2}'),
        idempotency_key="k",
        time_limit=30,
    )


def _call(way: Way, request: ToolRunRequest) -> None:
    started = time.perf_counter()
    if way.run is None:
        answer = run_tool_call(request)
    else:
        found, _ = way.run.run(request, 60)
        assert found is not None
        answer = found
    way.samples.append(time.perf_counter() - started)
    assert answer.status == "ok" and answer.content.startswith("1.414"), answer


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _template_rss_mb(known: set[int]) -> tuple[float, set[int]]:
    """The resident memory of this process's child that was not there before (its template)."""
    children = set(call_process._children())
    new = children - known
    return (sum(_rss_mb(pid) for pid in new), children)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(
    way: Callable[[dict[str, str], Callable[[int], None]], call_runner.Template],
    environment: dict[str, str],
) -> tuple[float, float]:
    """One template started `way`, to ready: its wall time and its own CPU then."""
    started = time.perf_counter()
    connection, stop, pid = way(environment, lambda _: None)
    wall = time.perf_counter() - started
    cpu = _cpu_seconds(pid)
    connection.close()
    stop()
    return wall, cpu


def template_starts(rounds: int) -> None:
    """A local runner's template started afresh and forked, alternately: see the docstring."""
    from toolpipe.infra.local import aws_forwarding, fork_server

    if not fork_server.usable():
        print("template start: no fork server here (not Linux): every template starts afresh")
        return
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TOOLPIPE_", "AWS_", "OPENAI_"))},
        "TOOLPIPE_APP": APP,
        aws_forwarding.LOCAL_AWS_ENV: "/nonexistent/broker",  # never called: the app only
        "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in sys.path if p),
    }

    def fresh(env: dict[str, str], started: Callable[[int], None]) -> call_runner.Template:
        return call_runner.spawn(env, None, fork_server.HOST_MODULE, started)

    server_first = _start(fork_server.start_template, environment)  # the server's start with it
    samples: dict[str, list[tuple[float, float]]] = {"fresh interpreter": [], "forked (fork server)": []}
    for _ in range(rounds):
        samples["fresh interpreter"].append(_start(fresh, environment))
        samples["forked (fork server)"].append(_start(fork_server.start_template, environment))
    print(f"a local template's start, {rounds} of each way, alternating; load {os.getloadavg()[0]:.1f}")
    medians = {}
    for name, taken in samples.items():
        wall, cpu = statistics.median(w for w, _ in taken), statistics.median(c for _, c in taken)
        medians[name] = cpu
        print(f"  {name:<24} median {wall * 1000:6.0f} ms to ready, its CPU {cpu * 1000:4.0f} ms")
    forked_cpu = max(medians["forked (fork server)"], 0.01)  # the clock counts in 10 ms ticks
    print(
        f"  forked: {medians['fresh interpreter'] / forked_cpu:.1f}x less CPU; the server's own start"
        f" with the first template {server_first[0] * 1000:.0f} ms (once per process)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one round of 5 calls each: seconds")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=25)
    options = parser.parse_args()
    rounds, calls = (1, 5) if options.quick else (options.rounds, options.calls)
    os.environ["TOOLPIPE_APP"] = APP
    load = os.getloadavg()[0]
    prepare()  # the app, imported here as in the runner: the forked template starts with it
    known = set(call_process._children())
    forked = call_runner.CallProcesses.forked(then=prepare)
    forked_rss, known = _template_rss_mb(known)
    spawned = call_runner.CallProcesses.spawned(dict(os.environ))
    ways = [
        Way("in process", None, []),
        Way("forked (deployed)", forked, []),
        Way("fresh template", spawned, []),
    ]
    request = _request()
    for way in ways:
        _call(way, request)  # the first call starts a spawned template: not a call's cost
        way.samples.clear()
    spawned_rss, _ = _template_rss_mb(known)
    for _ in range(rounds):
        for way in ways:
            for _ in range(calls):
                _call(way, request)
    for way in ways[1:]:
        assert way.run is not None
        way.run.close()
    base = statistics.median(ways[0].samples)
    print(
        f"a tool call, {rounds} round(s) of {calls} per way, interleaved; load {load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    for way in ways:
        ordered = sorted(way.samples)
        median = statistics.median(ordered)
        p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
        added = "" if way.run is None else f", +{(median - base) * 1000:.1f} ms a call"
        print(f"  {way.name:<24} median {median * 1000:6.2f} ms, p95 {p95 * 1000:6.2f} ms{added}")
    print(
        f"  template memory: forked {forked_rss:.0f} MB resident (shared with the runner until written), fresh {spawned_rss:.0f} MB"
    )
    print(f"  runner process: {_rss_mb(os.getpid()):.0f} MB resident")
    template_starts(2 if options.quick else options.rounds)


if __name__ == "__main__":
    main()
