"""Scenario 6: tool results and final answers from 10 KB to 20 MB through the pipeline: every
DynamoDB item stays under 400 KB, every Step Functions state input and output under 256 KiB,
and the whole content is reachable from the store."""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Pipeline, _pipeline, call
from tests.reliability.figures import record
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.messages import AssistantMessage, ToolResult

SIZES_KB = [10, 100, 1_000, 5_000, 20_000]
DYNAMODB_ITEM_LIMIT = (
    400 * 1024
)  # https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html
STATE_PAYLOAD_LIMIT = 256 * 1024  # https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html


def _answer_text(kb: int) -> str:
    return ("answer " * (kb * 1000 // 7 + 1))[: kb * 1000]


def _responder(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    kb = int(prompt.split()[-1])
    if messages[-1]["role"] == "tool":
        return Reply(content=_answer_text(kb))
    return Reply(tool_calls=[call("big_output", kilobytes=kb)])


def _attribute_size(value: dict[str, Any]) -> int:
    """DynamoDB's item size rules, for the types our items use."""
    ((kind, inner),) = value.items()
    if kind in ("S", "N"):
        return len(str(inner).encode())
    if kind == "B":
        return len(inner)
    if kind == "BOOL" or kind == "NULL":
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _attribute_size(v) for k, v in inner.items())
    if kind == "L":
        return 3 + sum(1 + _attribute_size(v) for v in inner)
    return len(json.dumps(inner).encode())


def _item_size(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + _attribute_size(value) for name, value in item.items())


def _largest_state_payload(events: list[dict[str, Any]]) -> int:
    largest = 0
    for event in events:
        for key, details in event.items():
            if not key.endswith("EventDetails") or not isinstance(details, dict):
                continue
            for field in ("input", "output", "parameters"):
                if isinstance(details.get(field), str):
                    largest = max(largest, len(details[field].encode()))
    return largest


@pytest.fixture
def sized() -> Iterator[Pipeline]:
    yield from _pipeline()


def test_results_and_answers_from_10_kb_to_20_mb(sized: Pipeline) -> None:
    from toolpipe.infra.local.isolation import running_as

    sized.model.responder = _responder
    run_ids = {kb: sized.start(f"produce {kb}") for kb in SIZES_KB}
    # Built as the orchestrator: its settings are in that function's environment only.
    with running_as(sized.runtime.functions["orchestrator"]):
        from toolpipe.functions.orchestrator import handler

        store = handler.service()._store
    lost: list[str] = []
    largest_api_body = 0
    for kb, run_id in run_ids.items():
        sized.runtime.wait_for_execution(run_id, timeout=120)
        run = store.get_run(run_id)
        if run.status != "succeeded":
            lost.append(f"{kb} KB run {run.status}: {run.error}")
            continue
        result = store.get_item(run_id, 3)
        if not isinstance(result, ToolResult):
            lost.append(f"{kb} KB tool result: none stored")
        else:
            # Short results are the item's content; longer ones a preview and the whole in S3.
            ref = result.full_result_ref
            whole_result = result.content if ref is None else store.get_result(ref)
            if whole_result != "x" * (kb * 1000):
                lost.append(f"{kb} KB tool result: the whole result is not reachable")
        answer = store.get_item(run_id, 4)
        if not isinstance(answer, AssistantMessage) or answer.content != _answer_text(kb):
            lost.append(f"{kb} KB answer: the model's reply is not stored whole")
        whole = run.output if run.output_ref is None else store.get_result(run.output_ref)
        if whole != _answer_text(kb):
            lost.append(f"{kb} KB answer: the run's output is not reachable whole")
        _status, body = sized.runtime.api("GET", f"/runs/{run_id}")
        largest_api_body = max(largest_api_body, len(json.dumps(body).encode()))

    items: list[dict[str, Any]] = []
    for page in sized.runtime.dynamodb.get_paginator("scan").paginate(TableName="toolpipe-local"):
        items.extend(page["Items"])
    largest_item = max(_item_size(i) for i in items)
    too_big_items = sum(_item_size(i) >= DYNAMODB_ITEM_LIMIT for i in items)
    largest_payload = max(_largest_state_payload(sized.runtime.execution_events(r)) for r in run_ids.values())

    tried = 2 * len(SIZES_KB)
    met = not lost and too_big_items == 0 and largest_payload < STATE_PAYLOAD_LIMIT
    record(
        "6 tool results and answers of 10 KB - 20 MB (pipeline)",
        tried=tried,
        survived=tried - len(lost),
        lost=len(lost),
        duplicated=0,
        goal="items < 400 KB, state payloads < 256 KiB, all content reachable",
        met=met,
        note=(
            f"sizes {', '.join(f'{kb:,} KB' for kb in SIZES_KB)} as a tool result and as a final answer in "
            f"one run each; {len(items)} DynamoDB items, largest {largest_item / 1024:.1f} KB; largest Step "
            f"Functions state input/output/parameters {largest_payload:,} bytes. The current GET /runs/{{id}} "
            f"answer reached {largest_api_body / 1e6:.1f} MB: past the 6 MB a Lambda response may hold, so "
            "API Gateway would answer 502 for it (it returns every message whole; wip-api pages previews)."
        ),
    )
    assert not lost, lost
    assert too_big_items == 0, f"largest item {largest_item} bytes"
    assert largest_payload < STATE_PAYLOAD_LIMIT
