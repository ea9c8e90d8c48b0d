"""What a reference run costs on AWS, as toolpipe counts it, beside the peer design's model.

    python -m benchmarks.cost          # also printed by `make bench`

One run in the local runtime with a scripted model: 5 tool turns of 2 parallel calls, then the
answer. Its counted operations (shared/costs: measured by the pipeline's own clients and the
executions' histories, not modelled) are priced with the default price table, by service. Beside
them, the peer design's model (a Step Functions agent loop whose cost is its state transitions:
5 + 2m a turn for m calls a turn), at the same price. Figures, not pass/fail.

Then what waiting for the model's rate limit costs: a governed wait (the run waits in a Wait state,
shared/runs/rate_governor.py), counted as the difference between two runs, one answered at once
and one answered 429 first; beside it, a call retried inside the orchestrator, whose Lambda is
billed while it sleeps through the Retry-After.
"""

import os
import time
from typing import Any

TURNS = 5
CALLS = 2
PROMPT = f"reference run: {TURNS} turns of {CALLS} calls"


def peer_transitions(turns: int, calls: int) -> int:
    """The peer design's model: 5 + 2m state transitions a turn."""
    return turns * (5 + 2 * calls)


def responder(request: dict[str, Any]) -> Any:
    from toolpipe.infra.local.scripted_model import Reply

    done = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")
    if done < TURNS:
        return Reply(tool_calls=[("sum", {"a": done, "b": i}) for i in range(CALLS)])
    return Reply(content="done")


def reference_cost() -> tuple[dict[str, Any], float]:
    """The reference run's `cost` (as `GET /runs/{id}` gives it) and its wall time in seconds."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from assistant.agents import sum as sum_tool

    from benchmarks.runtime import bench_runtime
    from toolpipe.infra.local.scripted_model import ScriptedModelServer
    from toolpipe.shared.agents import AGENTS, Agent

    AGENTS["bench_cost"] = Agent(name="bench_cost", instructions="Sum.", tools=[sum_tool], max_iterations=50)
    with ScriptedModelServer(responder) as model, bench_runtime(model.base_url) as runtime:
        started = time.perf_counter()
        status, body = runtime.api("POST", "/runs", {"prompt": PROMPT, "agent": "bench_cost"})
        assert status == 202, body
        run_id = body["run_id"]
        described = runtime.wait_for_execution(run_id, timeout=60)
        elapsed = time.perf_counter() - started
        if described["status"] != "SUCCEEDED":
            raise RuntimeError(f"run {run_id} ended {described['status']}")
        status, view = runtime.api("GET", f"/runs/{run_id}")
        assert status == 200, view
    return view["cost"], elapsed


def table(cost: dict[str, Any]) -> list[str]:
    from toolpipe.shared.costs.prices import PriceTable

    ops, usd = cost["operations"], cost["by_service"]
    functions = ops["functions"]
    invocations = sum(use["requests"] for use in functions.values())
    gb_s = sum(use["mb_ms"] for use in functions.values()) / 1024 / 1000
    peer = peer_transitions(TURNS, CALLS)
    peer_usd = peer * PriceTable().state_transition
    rows = [
        (
            "Step Functions",
            f"{ops['state_transitions']} transitions",
            usd["stepfunctions"],
            f"{peer} transitions",
            peer_usd,
        ),
        ("Lambda", f"{invocations} requests, {gb_s:.2f} GB-s", usd["lambda"], "not modelled", None),
        (
            "DynamoDB",
            f"{ops['dynamodb_requests']} requests, {ops['read_units']:g} RRU + {ops['write_units']} WRU",
            usd["dynamodb"],
            "not modelled",
            None,
        ),
        ("SQS", f"{ops['sqs_requests']} requests", usd["sqs"], "not modelled", None),
        (
            "S3",
            f"{ops['s3_tier1_requests']} tier 1 + {ops['s3_tier2_requests']} tier 2",
            usd["s3"],
            "not modelled",
            None,
        ),
        ("EventBridge", f"{ops['events']} events", usd["events"], "not modelled", None),
        ("API Gateway", f"{ops['api_requests']} requests", usd["apigateway"], "not modelled", None),
    ]
    lines = [
        f"{'service':<15} {'toolpipe, counted':<44} {'USD':>12}   {'peer design, modelled':<22} {'USD':>12}",
    ]
    for name, counted, dollars, modelled, peer_dollars in rows:
        peer_text = "" if peer_dollars is None else f"{peer_dollars:.8f}"
        lines.append(f"{name:<15} {counted:<44} {dollars:>12.8f}   {modelled:<22} {peer_text:>12}")
    lines.append(f"{'infrastructure':<15} {'':<44} {cost['infra_usd']:>12.8f}   {'':<22} {peer_usd:>12.8f}")
    share = usd["stepfunctions"] / cost["infra_usd"] * 100 if cost["infra_usd"] else 0
    lines.append(f"Step Functions is {share:.0f}% of toolpipe's figure; prices: {cost['prices']['source']}")
    return lines


# The Retry-After values the comparison is printed for, in seconds.
RETRY_AFTERS = (1, 10, 60)


def governed_wait_operations() -> dict[str, Any]:
    """What one governed wait adds to a run: the counted operations of a run answered 429
    (Retry-After 1 s) then answered, less those of a run answered at once."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from benchmarks.runtime import bench_env
    from toolpipe.infra.local.runtime import LocalRuntime
    from toolpipe.infra.local.scripted_model import (
        Answer,
        HttpError,
        Reply,
        ScriptedModelServer,
        ScriptResponder,
    )
    from toolpipe.shared.agents import AGENTS, Agent

    AGENTS["bench_wait"] = Agent(name="bench_wait", instructions="Answer.", max_iterations=5)
    too_many = HttpError(
        429, {"error": {"message": "Rate limit reached", "type": "requests"}}, {"retry-after": "1"}
    )
    # A rate far above what two runs ask: the governor paces nothing, it only turns the 429 into a wait.
    governed = {"TOOLPIPE_MODEL_RATE_PER_MINUTE": "6000"}
    costs = []
    with (
        ScriptedModelServer(ScriptResponder([])) as model,
        LocalRuntime(extra_env={**bench_env(model.base_url), **governed}) as runtime,
    ):
        # The first run pays the orchestrator's cold start: a warm-up, not counted.
        scripts: list[list[Answer]] = [
            [Reply(content="done")],
            [Reply(content="done")],
            [too_many, Reply(content="done")],
        ]
        for script in scripts:
            model.responder = ScriptResponder(script)
            status, body = runtime.api("POST", "/runs", {"prompt": "answer", "agent": "bench_wait"})
            assert status == 202, body
            described = runtime.wait_for_execution(body["run_id"], timeout=60)
            if described["status"] != "SUCCEEDED":
                raise RuntimeError(f"run {body['run_id']} ended {described['status']}")
            costs.append(runtime.api("GET", f"/runs/{body['run_id']}")[1]["cost"])
    plain, waited = (c["operations"] for c in costs[1:])
    used, before = waited["functions"]["orchestrator"], plain["functions"]["orchestrator"]
    extra_requests = used["requests"] - before["requests"]
    # Each extra invocation at the mean of the run's own: a difference of two runs' durations
    # is noise at this size (a few ms, under other load).
    orchestrator = {"requests": extra_requests, "mb_ms": used["mb_ms"] / used["requests"] * extra_requests}
    return {
        "state_transitions": waited["state_transitions"] - plain["state_transitions"],
        "lambda_requests": orchestrator["requests"],
        "lambda_mb_ms": orchestrator["mb_ms"],
        "dynamodb_read_units": waited["read_units"] - plain["read_units"],
        "dynamodb_write_units": waited["write_units"] - plain["write_units"],
        "events": waited["events"] - plain["events"],
    }


def wait_table(extra: dict[str, Any]) -> list[str]:
    """A governed wait (the same whatever its length) beside a retried call's sleeping Lambda."""
    from toolpipe.infra.cdk.functions import ORCHESTRATOR
    from toolpipe.shared.costs.prices import PriceTable

    prices = PriceTable()
    governed = (
        extra["state_transitions"] * prices.state_transition
        + extra["lambda_requests"] * prices.lambda_request
        + extra["lambda_mb_ms"] / 1024 / 1000 * prices.lambda_gb_second
        + extra["dynamodb_read_units"] * prices.dynamodb_read_unit
        + extra["dynamodb_write_units"] * prices.dynamodb_write_unit
        + extra["events"] * prices.event
    )
    gb = ORCHESTRATOR.memory_mb / 1024
    lines = [
        f"a governed wait adds {extra['state_transitions']} state transitions, {extra['lambda_requests']} "
        f"orchestrator request ({extra['lambda_mb_ms'] / 1024 / 1000:.3f} GB-s) and "
        f"{extra['dynamodb_read_units']:g} RRU + {extra['dynamodb_write_units']:g} WRU and "
        f"{extra['events']} event, whatever its length",
        f"{'Retry-After':<12} {'governed wait, USD':>20} {'retried call: Lambda sleeping, USD':>36}",
    ]
    for seconds in RETRY_AFTERS:
        sleeping = seconds * gb * prices.lambda_gb_second
        lines.append(f"{seconds:>8} s   {governed:>20.8f} {sleeping:>36.8f}")
    even = governed / (gb * prices.lambda_gb_second)
    lines.append(
        f"in dollars a governed wait costs what {even:.0f} s of the orchestrator ({ORCHESTRATOR.memory_mb} MB) "
        "sleeping does; a sleeping call also holds a Lambda's concurrency, and cannot wait past its timeout"
    )
    return lines


def report() -> None:
    cost, elapsed = reference_cost()
    print(
        f"what a reference run costs on AWS ({TURNS} turns x {CALLS} parallel calls, then the answer; "
        f"ran locally in {elapsed:.1f} s):"
    )
    for line in table(cost):
        print("  " + line)
    print("what waiting for the model's rate limit costs on AWS:")
    for line in wait_table(governed_wait_operations()):
        print("  " + line)


if __name__ == "__main__":
    report()
