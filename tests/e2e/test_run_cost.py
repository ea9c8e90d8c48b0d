"""What a run cost, held to what really happened: every AWS request the pipeline's functions made
is counted on moto's side (where every in-process request arrives), every function invocation
where the local runtime runs it, and the run's recorded counts must equal them."""

import json
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from moto.core.botocore_stubber import BotocoreStubber

from tests.conftest import Capture, Pipeline, call
from toolpipe.infra.cli import main
from toolpipe.infra.local import isolation, lambdas, workers
from toolpipe.infra.local.runtime import TABLE
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.costs import dynamodb_units
from toolpipe.shared.costs.operations import Operations

# The functions whose AWS requests are the pipeline's (the tool runner's are a tool's own).
PIPELINE = ("api", "orchestrator", "tool_worker", "triggers")


@dataclass
class Seen:
    """What moto served and the runtime invoked while a run went, by kind."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (service, operation)
    read_units: float = 0
    write_units: int = 0
    invocations: Counter[str] = field(default_factory=Counter)
    by_caller: Counter[str] = field(default_factory=Counter)


def _role(name: str | None) -> str | None:
    if name is None:
        return None
    return next((role for role in (*PIPELINE, "tool_runner") if name.endswith(role)), name)


def _operation(request: Any) -> tuple[str, str]:
    target = request.headers.get("X-Amz-Target") or b""
    target = target.decode() if isinstance(target, bytes) else str(target)
    if target:
        prefix, operation = target.split(".", 1)
        service = {"DynamoDB_20120810": "dynamodb", "AmazonSQS": "sqs", "AWSEvents": "events"}.get(
            prefix, prefix
        )
        return service, operation
    url = urlsplit(request.url)
    if "lambda" in url.netloc:
        return "lambda", "Invoke" if url.path.endswith("/invocations") else url.path
    if "s3" in url.netloc:
        query = url.query
        if request.method in ("GET", "HEAD") and "list-type" not in query:
            return "s3", "tier2"
        if request.method == "DELETE" or (request.method == "POST" and "delete" in query):
            return "s3", "free"
        return "s3", "tier1"
    return url.netloc, request.method


def _body(data: Any) -> dict[str, Any]:
    if not data:
        return {}
    text = data.decode() if isinstance(data, bytes) else str(data)
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[Seen]:
    seen = Seen()
    counting = threading.Event()
    serve = BotocoreStubber.process_request

    def process_request(self: BotocoreStubber, request: Any) -> Any:
        response = serve(self, request)
        if not counting.is_set() or response is None:
            return response
        context = isolation.current()
        role = _role(context.name if context is not None else None)
        service, operation = _operation(request)
        status, _, body = response
        with seen.lock:
            seen.by_caller[f"{role}:{service}.{operation}"] += 1
            if service == "sqs" and operation == "ReceiveMessage" and not _body(body).get("Messages"):
                return response  # an empty poll: the poller's, no run's
            if role in PIPELINE or service == "sqs":
                seen.requests[service, operation] += 1
                if service == "dynamodb":
                    answer = _body(body)
                    if status >= 300:
                        answer = {"Error": {"Code": str(answer.get("__type", "")).rsplit("#", 1)[-1]}}
                    reads, writes = dynamodb_units.units(operation, _body(request.body), answer)
                    seen.read_units += reads
                    seen.write_units += writes
        return response

    call = lambdas.call_handler

    def call_handler(handler: str, event: Any, context: Any) -> Any:
        if counting.is_set():
            with seen.lock:
                seen.invocations[_role(context.function_name) or ""] += 1
        return call(handler, event, context)

    monkeypatch.setattr(BotocoreStubber, "process_request", process_request)
    monkeypatch.setattr(lambdas, "call_handler", call_handler)
    monkeypatch.setattr(workers, "call_handler", call_handler)
    seen.start = counting.set  # type: ignore[attr-defined]
    seen.stop = counting.clear  # type: ignore[attr-defined]
    yield seen


def _transitions(pipeline: Pipeline, run_id: str) -> int:
    arns = [
        e["executionArn"]
        for e in pipeline.runtime.sfn.list_executions(stateMachineArn=pipeline.runtime.state_machine_arn)[
            "executions"
        ]
        if e["name"].split("--")[0] == run_id
    ]
    billed = 0
    for arn in arns:
        pages = pipeline.runtime.sfn.get_paginator("get_execution_history").paginate(executionArn=arn)
        kinds = [e["type"] for page in pages for e in page["events"]]
        # Each state entered, and each Task retry (a scheduling past the first of an entry).
        scheduled = sum(k in ("TaskScheduled", "LambdaFunctionScheduled") for k in kinds)
        billed += sum(k.endswith("StateEntered") for k in kinds)
        billed += max(0, scheduled - kinds.count("TaskStateEntered"))
    return billed


def _recorded(pipeline: Pipeline, run_id: str) -> Operations:
    item = pipeline.runtime.dynamodb.get_item(
        TableName=TABLE, Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "COST"}}, ConsistentRead=True
    )["Item"]
    return Operations.from_counters({k: next(iter(v.values())) for k, v in item.items()})


def test_a_runs_counts_are_the_operations_the_pipeline_made(pipeline: Pipeline, seen: Any) -> None:
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="a"), call("count_once", label="b")]),
        Reply(tool_calls=[call("count_once", label="c"), call("big_output", kilobytes=150)]),
        Reply(content="done"),
    )
    seen.start()
    run_id = pipeline.start("count")
    pipeline.runtime.wait_for_execution(run_id, 60)
    seen.stop()

    ops = _recorded(pipeline, run_id)
    by_caller = dict(seen.by_caller)
    requests = seen.requests
    assert ops.dynamodb_requests == sum(n for (s, _), n in requests.items() if s == "dynamodb"), by_caller
    assert ops.read_units == seen.read_units, by_caller
    assert ops.write_units == seen.write_units, by_caller
    assert ops.sqs_requests == sum(n for (s, _), n in requests.items() if s == "sqs"), by_caller
    assert ops.s3_tier1_requests == requests["s3", "tier1"], by_caller
    assert ops.s3_tier2_requests == requests["s3", "tier2"], by_caller
    assert ops.events == requests["events", "PutEvents"], by_caller  # one entry each
    assert ops.api_requests == 1
    assert {role: use.requests for role, use in ops.functions.items()} == dict(seen.invocations)
    assert ops.functions["tool_runner"].requests == requests["lambda", "Invoke"] == 4
    assert ops.state_transitions == _transitions(pipeline, run_id) > 0
    # Each invocation was billed at least a millisecond at its memory.
    assert all(use.mb_ms >= use.requests * 128 for use in ops.functions.values())


def test_show_reports_model_and_infrastructure_cost(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path / "state"))
    out = Capture()
    assert main(["run", "What is the square root of 475695037565?"], out, Capture()) == 0, out.text
    run_id = out.text.split("run ")[1].split()[0]

    shown = Capture()
    assert main(["show", run_id, "--json"], shown) == 0
    cost = json.loads(shown.text)["cost"]
    assert set(cost) >= {"model_usd", "infra_usd", "total_usd", "operations", "prices", "by_service"}
    assert cost["infra_usd"] > 0
    assert cost["total_usd"] == pytest.approx(cost["model_usd"] + cost["infra_usd"])
    assert cost["infra_usd"] == pytest.approx(sum(cost["by_service"].values()))
    ops = cost["operations"]
    assert ops["state_transitions"] > 0 and ops["dynamodb_requests"] > 0
    assert set(ops["functions"]) == {"api", "orchestrator", "tool_worker", "tool_runner"}
    assert cost["prices"]["region"] == "us-east-1"
    assert cost["scope"] == "run"

    text = Capture()
    assert main(["show", run_id], text) == 0
    line = next(line for line in text.text.splitlines() if line.startswith("cost: "))
    assert f"AWS ${cost['infra_usd']:.6f}" in line
    assert f"{ops['state_transitions']} state transitions" in line
    # The region once: the default source names it already (issue 33, item 12).
    assert line.endswith(" DynamoDB units; AWS list prices, us-east-1, on-demand, 2025)"), line


def test_a_repeated_or_foreign_ending_event_counts_nothing_more(pipeline: Pipeline) -> None:
    from toolpipe.infra.cdk.functions import ORCHESTRATOR

    pipeline.script(Reply(tool_calls=[call("count_once", label="a")]), Reply(content="done"))
    run_id = pipeline.start("count")
    pipeline.finish(run_id)
    before = _recorded(pipeline, run_id).state_transitions
    arn = pipeline.runtime.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{run_id}"
    again = {"action": "execution_ended", "execution": run_id, "status": "SUCCEEDED", "execution_arn": arn}
    assert lambdas.call_function(ORCHESTRATOR, again) == {"status": "counted"}
    # Another state machine's execution under this run's name: not this function's to read.
    foreign = {
        **again,
        "execution": f"{run_id}--7",
        "execution_arn": "arn:aws:states:us-east-1:123456789012:execution:other:x",
    }
    assert lambdas.call_function(ORCHESTRATOR, foreign) == {"status": "counted"}
    assert _recorded(pipeline, run_id).state_transitions == before == _transitions(pipeline, run_id)
