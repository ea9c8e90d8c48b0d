"""Scenario 5: fuzzed model replies — duplicate, empty, null, reused and huge call ids; odd,
null, huge and unknown names; broken, non-object and huge JSON arguments; 100 calls in one
reply — through the real `openai` client and the orchestrator's model step on moto. Every
reply yields a decision; every call gets exactly one result or one dispatch; call ids are
unique within the run; nothing outside the run's tool set is dispatched; nothing crashes."""

import json
import os
import random
import time
from typing import Any

from tests.reliability.figures import record
from tests.reliability.harness import NoStarter, RecordingReporter, moto_tables
from toolpipe.infra.local.scripted_model import RawResponse, ScriptedModelServer
from toolpipe.shared.agents import get_agent
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.messages import (
    AssistantMessage,
    CallOutcome,
    DecisionStatus,
    RunRecord,
    RunStatus,
    StepRequest,
    ToolResult,
    UserMessage,
)
from toolpipe.shared.model.openai_client import OpenAIModelClient, build_openai_client
from toolpipe.shared.runs import ModelStep
from toolpipe.shared.runs.catalog import RegisteredAgents
from toolpipe.shared.settings import CallTimeouts

REPLIES = int(os.environ.get("TOOLPIPE_FUZZ_REPLIES", "1000"))
ON_MOTO = int(os.environ.get("TOOLPIPE_FUZZ_ON_MOTO", "200"))
HOSTILE_REPLIES = 100
RUNS_PER_TABLE = 25
KNOWN = ["count_once", "big_output", "explode", "slow", "remember", "recall", "render_report", "flaky"]
GOOD_ARGS = {
    "count_once": {"label": "a"},
    "big_output": {"kilobytes": 1},
    "explode": {"reason": "r"},
    "slow": {"seconds": 0},
    "remember": {"key": "k", "value": "v"},
    "recall": {"key": "k"},
    "render_report": {"title": "t"},
    "flaky": {"failures": 0},
}


class Fuzzer:
    """`hostile_types`: also ids and names that are not strings (null, numbers) and arguments
    nested thousands deep; without it every id and name is a string, however odd."""

    def __init__(self, seed: int, hostile_types: bool) -> None:
        self.rng = random.Random(seed)
        self.hostile = hostile_types
        self.previous_ids: list[str] = []

    def _id(self, index: int) -> Any:
        r = self.rng.random()
        if r < 0.45:
            return f"call_{self.rng.getrandbits(40):x}"
        choices: list[Any] = [
            "call_0",  # the same in every call of the reply
            "",
            "x" * self.rng.choice([65, 1_000, 20_000]),
            "call 1\n💥",
            f"call_{index}",
            self.rng.choice(self.previous_ids) if self.previous_ids else "call_0",
        ]
        if self.hostile:
            choices = [None, 12345, {"id": 1}]
        return self.rng.choice(choices)

    def _name(self) -> Any:
        r = self.rng.random()
        if r < 0.6:
            return self.rng.choice(KNOWN)
        if self.hostile:
            return self.rng.choice([None, 7, ["count_once"]])
        return self.rng.choice(
            ["", "no_such_tool", "count once", "../../etc/passwd", "名前", "n" * 100_000, "COUNT_ONCE"]
        )

    def _arguments(self, name: Any) -> Any:
        r = self.rng.random()
        if r < 0.5 and isinstance(name, str) and name in GOOD_ARGS:
            return json.dumps(GOOD_ARGS[name])
        if self.hostile and r < 0.75:
            return self.rng.choice(["[" * 3_000 + "]" * 3_000, '{"label": ' * 2_000 + "1" + "}" * 2_000])
        return self.rng.choice(
            [
                "{",
                "",
                None,
                "null",
                "[1, 2]",
                "42",
                '"text"',
                '{"label": 1e999}',
                '{"kilobytes": ' + "9" * 5_000 + "}",
                '{"seconds": -1e308}',
                '{"label": "' + "z" * 200_000 + '"}',
                "[" * 50 + "]" * 50,
                '{"label": "a", "label": "b"}',
                '{"label": "a", "extra": true}',
                "{'label': 'single quotes'}",
                '{"label": "\\ud800"}',
            ]
        )

    def reply(self) -> tuple[dict[str, Any], int]:
        r = self.rng.random()
        count = 100 if r < 0.01 else 0 if r < 0.15 else self.rng.randint(1, 6)
        calls = []
        for i in range(count):
            name = self._name()
            call: dict[str, Any] = {
                "id": self._id(i),
                "type": "function" if self.rng.random() < 0.97 else "custom",
                "function": {"name": name, "arguments": self._arguments(name)},
            }
            if self.rng.random() < 0.02:
                del call["function"]["arguments"]
            calls.append(call)
        self.previous_ids.extend(
            str(c["id"]) for c in calls if isinstance(c["id"], str) and len(c["id"]) < 100
        )
        self.previous_ids = self.previous_ids[-50:]
        content = (
            self.rng.choice([None, "", "Thinking.", "x" * 5_000])
            if calls
            else self.rng.choice(["done", "", None])
        )
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        return (
            {
                "id": "chatcmpl-fuzz",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": "fuzz",
                "choices": [
                    {"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
            },
            count,
        )


class FuzzResponder:
    def __init__(self, fuzzer: Fuzzer) -> None:
        self.fuzzer = fuzzer
        self.served = 0

    def __call__(self, request: dict[str, Any]) -> RawResponse:
        body, _ = self.fuzzer.reply()
        self.served += 1
        return RawResponse(200, json.dumps(body).encode())


def _fuzz(replies: int, hostile_types: bool, scenario: str, on_moto: int) -> None:
    """`on_moto` of the replies go to runs on DynamoHistoryStore (moto), the rest to runs on
    MemoryHistoryStore: the same port and model step, at a fraction of moto's ~10 ms a request."""
    fuzzer = Fuzzer(seed=5, hostile_types=hostile_types)
    responder = FuzzResponder(fuzzer)
    reporter = RecordingReporter()
    agent = get_agent("tester")
    crashes: list[str] = []
    problems: list[str] = []
    calls_seen = dispatched = answered = ended_with_run = 0
    steps = 0
    outside = duplicate_ids = bad_replies = 0
    with ScriptedModelServer(responder) as server, moto_tables() as tables:
        client = OpenAIModelClient(
            build_openai_client(server.base_url, "fuzz"), timeout_seconds=10, max_retries=0
        )
        step_service: ModelStep | None = None
        store: Any = None
        on_moto_runs = 0
        r = 0
        while responder.served < replies:
            if responder.served >= on_moto and not isinstance(store, MemoryHistoryStore):
                store = MemoryHistoryStore()
                step_service = ModelStep(
                    store,
                    client,
                    "fuzz",
                    CallTimeouts(),
                    reporter,
                    lambda arn: NoStarter(),
                    agents=RegisteredAgents(),
                )
            elif r % RUNS_PER_TABLE == 0 and not isinstance(store, MemoryHistoryStore):
                store = tables.store(f"fuzz-{r}")
                step_service = ModelStep(
                    store,
                    client,
                    "fuzz",
                    CallTimeouts(),
                    reporter,
                    lambda arn: NoStarter(),
                    agents=RegisteredAgents(),
                )
            assert step_service is not None
            run_id = f"fuzz-{r}"
            on_moto_runs += not isinstance(store, MemoryHistoryStore)
            allowed = None if r % 3 else ["count_once", "recall"]
            store.create_run(
                RunRecord(run_id=run_id, agent="tester", status=RunStatus.RUNNING, tools=allowed),
                UserMessage(seq=1, turn=0, content="fuzz"),
            )
            r += 1
            results: list[CallOutcome] = []
            for _turn in range(2):
                if responder.served >= replies:
                    break
                before = responder.served
                try:
                    decision = step_service.step(
                        StepRequest(run_id=run_id, results=results), time.monotonic() + 60
                    )
                except Exception as e:
                    crashes.append(f"{run_id}: {type(e).__name__}: {str(e)[:160]}")
                    break
                steps += 1
                problems_before = len(problems)
                if responder.served == before:
                    break  # the run had ended: no model call
                history = store.load_history(run_id)
                reply = next(i for i in reversed(history) if isinstance(i, AssistantMessage))
                results_by_slot = {i.seq: i for i in history if isinstance(i, ToolResult)}
                dispatched_slots = [c.seq for c in decision.calls]
                if len(set(dispatched_slots)) != len(dispatched_slots):
                    problems.append(f"{run_id}: a call dispatched twice")
                ended = decision.status in (DecisionStatus.LIMIT, DecisionStatus.FAILED, DecisionStatus.FINAL)
                for index in range(len(reply.tool_calls)):
                    calls_seen += 1
                    slot = reply.seq + 1 + index
                    has_result, is_dispatched = slot in results_by_slot, slot in dispatched_slots
                    if has_result and is_dispatched:
                        problems.append(f"{run_id}: slot {slot} has a result and a dispatch")
                    elif has_result:
                        answered += 1
                    elif is_dispatched:
                        dispatched += 1
                    elif ended:
                        ended_with_run += 1
                    else:
                        problems.append(f"{run_id}: slot {slot} has neither a result nor a dispatch")
                for ref in decision.calls:
                    tools = allowed if allowed is not None else agent.registry.names
                    if ref.tool not in tools:
                        outside += 1
                ids = [c.id for i in history if isinstance(i, AssistantMessage) for c in i.tool_calls]
                if len(set(ids)) != len(ids):
                    duplicate_ids += 1
                    problems.append(f"{run_id}: call ids repeat within the run")
                bad_replies += len(problems) > problems_before
                if decision.status is not DecisionStatus.TOOL_CALLS:
                    break
                # The workers' part: a result for every dispatched call, then the next step.
                for ref in decision.calls:
                    call = reply.tool_calls[ref.seq - reply.seq - 1]
                    store.append(
                        run_id,
                        ToolResult(
                            seq=ref.seq,
                            turn=reply.turn,
                            call_id=call.id,
                            tool=call.name,
                            content="ok",
                            status="ok",
                        ),
                    )
                results = [CallOutcome(seq=ref.seq, status="ok") for ref in decision.calls]

    # A reply is lost when its step crashed (no decision); it survives when its step decided
    # and every check above held.
    lost = len(crashes)
    met = not crashes and not problems and outside == 0
    record(
        scenario,
        tried=responder.served,
        survived=responder.served - len(crashes) - bad_replies,
        lost=lost,
        duplicated=sum("twice" in p or "and a dispatch" in p for p in problems) + duplicate_ids,
        goal="a decision for every reply; 1 result or 1 dispatch per call; unique ids; 0 outside the tool set",
        met=met,
        note=(
            f"{r} runs ({on_moto_runs} on DynamoHistoryStore/moto, the rest on MemoryHistoryStore; a third "
            f"with a 2-tool allow-list), {steps} model steps, {calls_seen} calls: "
            f"{dispatched} dispatched, {answered} answered by the orchestrator with an error result, "
            f"{ended_with_run} left unanswered because the run ended at a limit in that step; "
            f"{outside} dispatched outside the run's tool set; {len(crashes)} crashes"
            + (f" (first: {crashes[0]})" if crashes else "")
            + "."
        ),
    )
    assert not crashes, "\n".join(crashes[:20])
    assert not problems, "\n".join(problems[:20])
    assert outside == 0


def test_fuzzed_model_replies() -> None:
    _fuzz(REPLIES, False, "5a fuzzed model replies (openai client + model step)", on_moto=ON_MOTO)


def test_fuzzed_model_replies_with_non_string_ids_and_deep_nesting() -> None:
    _fuzz(
        HOSTILE_REPLIES,
        True,
        "5b fuzzed replies: non-string ids/names, arguments nested 3,000 deep",
        on_moto=0,
    )
