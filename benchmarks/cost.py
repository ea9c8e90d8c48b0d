"""What a reference run costs on AWS, as toolpipe counts it, beside the peer design's model.

    python -m benchmarks.cost          # also printed by `make bench`

One run in the local runtime with a scripted model: 5 tool turns of 2 parallel calls, then the
answer. Its counted operations (shared/costs: measured by the pipeline's own clients and the
executions' histories, not modelled) are priced with the default price table, by service. Beside
them, the peer design's model (a Step Functions agent loop whose cost is its state transitions:
5 + 2m a turn for m calls a turn), at the same price. Figures, not pass/fail.
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


def report() -> None:
    cost, elapsed = reference_cost()
    print(
        f"what a reference run costs on AWS ({TURNS} turns x {CALLS} parallel calls, then the answer; "
        f"ran locally in {elapsed:.1f} s):"
    )
    for line in table(cost):
        print("  " + line)


if __name__ == "__main__":
    report()
