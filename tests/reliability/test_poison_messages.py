"""Scenario 3: poison messages (malformed JSON, missing or wrong-typed fields, huge bodies,
unknown runs, calls that name no call) in batches with good ones, through the real worker
handler: only the poison ones come back in batchItemFailures; the good ones run once and
their runs finish."""

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CALLS, Pipeline, _pipeline, call
from tests.functional.test_resilience import WORKER, _context, waiting_calls
from tests.reliability.figures import record
from toolpipe.infra.cdk.functions import TOOL_WORKER
from toolpipe.infra.local.lambdas import call_handler
from toolpipe.infra.local.scripted_model import Reply

GOOD_CALLS = 10
# A token no execution waits for means the call is over for Step Functions (the executor's
# first heartbeat says so): the message is deleted, by design, since nothing waits on it.
DROPPED_BY_DESIGN = {"unknown run, invented token"}
RUNS = 2
BATCH_SIZE = 10


@pytest.fixture
def held() -> Iterator[Pipeline]:
    yield from _pipeline(workers=0)


def _poison(good: dict[str, Any], rng: random.Random) -> list[tuple[str, str]]:
    """(kind, body) pairs; `good` is a real message body to mutate."""
    real = json.loads(good["Body"])
    bodies = [
        ("not JSON", "{not json"),
        ("empty body", ""),
        ("JSON null", "null"),
        ("JSON array", json.dumps([real])),
        ("missing task_token", json.dumps({k: v for k, v in real.items() if k != "task_token"})),
        ("missing seq", json.dumps({k: v for k, v in real.items() if k != "seq"})),
        ("seq as text", json.dumps({**real, "seq": "three"})),
        ("negative seq", json.dumps({**real, "seq": -1})),
        ("huge seq", json.dumps({**real, "seq": 10**30})),
        ("float seq", json.dumps({**real, "seq": 3.5})),
        ("huge body (250 KB of text)", "x" * 250_000),
        ("huge task token", json.dumps({**real, "task_token": "t" * 200_000})),
        ("huge run id", json.dumps({**real, "run_id": "r" * 100_000})),
        (
            "unknown run, invented token",
            json.dumps({**real, "run_id": "no-such-run", "task_token": "forged"}),
        ),
        ("unknown run, a real waiting token", json.dumps({**real, "run_id": "no-such-run"})),
        ("a slot that holds no call", json.dumps({**real, "message_seq": 1, "seq": 2})),
        ("deeply nested JSON", "[" * 5_000 + "]" * 5_000),
        ("binary junk", bytes(rng.randrange(256) for _ in range(512)).decode("latin-1")),
    ]
    return bodies


def _record(body: str, message_id: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": f"r-{message_id}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tools",
        "awsRegion": "us-east-1",
    }


def test_poison_messages_in_batches_are_reported_and_good_ones_done_once(held: Pipeline) -> None:
    rng = random.Random(3)
    per_run = GOOD_CALLS // RUNS
    held.script(
        *[
            Reply(tool_calls=[call("count_once", label=f"{r}-{i}") for i in range(per_run)])
            for r in range(RUNS)
        ],
        *[Reply(content="done") for _ in range(RUNS)],
    )
    run_ids: list[str] = []
    good: list[dict[str, Any]] = []
    for r in range(RUNS):
        run_ids.append(held.start(f"count {r}"))
        good.extend(waiting_calls(held, per_run))

    entries = [("good", m["Body"], f"good-{i}") for i, m in enumerate(good)]
    poison_kinds: dict[str, str] = {}
    for i, (kind, body) in enumerate(_poison(good[0], rng) * 2):
        poison_kinds[f"poison-{i}"] = kind
        entries.append(("poison", body, f"poison-{i}"))
    rng.shuffle(entries)

    reported: set[str] = set()
    crashed_batches = 0
    for start in range(0, len(entries), BATCH_SIZE):
        batch = entries[start : start + BATCH_SIZE]
        event = {"Records": [_record(body, mid) for _, body, mid in batch]}
        try:
            response = call_handler(WORKER, event, _context(TOOL_WORKER.name))
        except Exception:
            # The whole batch would come back: every good message in it redelivered.
            crashed_batches += 1
            reported.update(mid for _, _, mid in batch)
            continue
        reported.update(f["itemIdentifier"] for f in response["batchItemFailures"])

    statuses = [held.finish(run_id)["run"]["status"] for run_id in run_ids]
    poison_ids = set(poison_kinds)
    missed = sorted({poison_kinds[m] for m in poison_ids - reported} - DROPPED_BY_DESIGN)
    dropped = sorted({poison_kinds[m] for m in poison_ids - reported} & DROPPED_BY_DESIGN)
    wrongly_reported = sorted(m for m in reported - poison_ids)
    ran = CALLS.counts.get("count_once", 0)
    duplicated = max(0, ran - GOOD_CALLS)
    lost = GOOD_CALLS - min(ran, GOOD_CALLS) + len(wrongly_reported)
    met = not missed and not wrongly_reported and crashed_batches == 0 and duplicated == 0 and lost == 0
    met = met and statuses == ["succeeded"] * RUNS
    record(
        "3 poison messages mixed into batches (worker handler)",
        tried=len(entries),
        survived=len(entries) - 2 * len(missed) - len(wrongly_reported) - lost,
        lost=lost,
        duplicated=duplicated,
        goal="only poison reported; good done once",
        met=met,
        note=(
            f"{GOOD_CALLS} good messages (real task tokens) and {len(poison_ids)} poison ones "
            f"({len(poison_ids) // 2} kinds, each twice) shuffled into batches of {BATCH_SIZE}. "
            + (f"Poison not reported (deleted silently): {', '.join(missed)}. " if missed else "")
            + (
                f"Deleted without a report, by design (no execution waits on its token): {', '.join(dropped)}."
                if dropped
                else ""
            )
        ),
    )
    assert not wrongly_reported, f"good messages reported as failed: {wrongly_reported}"
    assert crashed_batches == 0
    assert ran == GOOD_CALLS
    assert statuses == ["succeeded"] * RUNS
    assert not missed, f"poison deleted without a report: {missed}"
