"""The loops toolpipe is measured beside: N tool turns against one scripted OpenAI-compatible
server, each with the same `sum` tool.

- the bare `openai` client's loop (call the model, run the tool, append, again): the floor;
- the OpenAI Agents SDK's run loop (`agents`, tracing off);
- Pydantic AI's agent loop (`pydantic_ai`, through its OpenAI chat model).

The two peers come with the `bench` extra (`pip install '.[bench]'`); without it they are
skipped, and `missing_peers` says which and how to get them. Each loop returns a `Sample`: the
wall time and the process's CPU time of the same interval (every thread's: the scripted server's
too, which is the same for every loop, so it cancels out of a difference with the bare loop's).
"""

import asyncio
import importlib.util
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from benchmarks.runtime import MODEL

PROMPT = "Count up, one tool call a turn."
# The peers' loops by name, and the module each needs (from the `bench` extra).
PEER_MODULES = {"agents": "agents", "pydantic_ai": "pydantic_ai"}
PEER_NAMES = {"agents": "OpenAI Agents SDK", "pydantic_ai": "Pydantic AI"}
SUM_SPEC = {
    "type": "function",
    "function": {
        "name": "sum",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
}


@dataclass(frozen=True)
class Sample:
    """One run of a loop: seconds of wall time and of the process's CPU time."""

    wall: float
    cpu: float


class Timer:
    """Wall and CPU time of a `with` block: `sample` once it has ended."""

    sample = Sample(0.0, 0.0)


@contextmanager
def timed() -> Iterator[Timer]:
    timer = Timer()
    wall, cpu = time.perf_counter(), time.process_time()
    yield timer
    timer.sample = Sample(time.perf_counter() - wall, time.process_time() - cpu)


def prompt(turns: int) -> str:
    return f"{PROMPT} {turns}"


def turns_responder(request: dict[str, Any]) -> Any:
    """Stateless, so every loop under test gets the same replies: the prompt says how many
    tool turns to make; each turn calls `sum`, then a plain answer ends the run. A prompt
    "wait N" asks for N parallel `wait_a_second` calls in one turn (the fan-out)."""
    from toolpipe.infra.local.scripted_model import Reply

    messages = request.get("messages", [])
    text = next(_text(m.get("content")) for m in messages if m.get("role") == "user")
    last = text.rsplit(" ", 1)[-1]
    wanted = int(last) if last.isdigit() else 0
    done = sum(1 for m in messages if m.get("role") == "assistant")
    if text.startswith("wait"):
        if done:
            return Reply(content="waited")
        return Reply(tool_calls=[("wait_a_second", {"n": i}) for i in range(wanted)])
    if done < wanted:
        return Reply(tool_calls=[("sum", {"a": done, "b": 1})])
    return Reply(content=f"counted to {done}")


def _text(content: Any) -> str:
    """A message's text, whether a string or a list of content parts (as some clients send)."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _sum(a: float, b: float) -> float:
    return a + b


def missing_peers() -> list[str]:
    """The peers whose package is not installed (without the `bench` extra: both)."""
    return [name for name, module in PEER_MODULES.items() if importlib.util.find_spec(module) is None]


def bare_loop(base_url: str, turns: int) -> Sample:
    """The floor: the `openai` client alone, the tool run inline."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="scripted")
    with timed() as timer:
        messages: list[Any] = [{"role": "user", "content": prompt(turns)}]
        for _ in range(turns + 2):
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=[SUM_SPEC])  # type: ignore[list-item]
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                args = json.loads(call.function.arguments)  # type: ignore[union-attr]
                messages.append({"role": "tool", "tool_call_id": call.id, "content": str(_sum(**args))})
    client.close()
    return timer.sample


def agents_sdk_loop(base_url: str, turns: int) -> Sample:
    """The OpenAI Agents SDK's run loop, on the same server, tracing off."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool  # type: ignore[untyped-decorator,unused-ignore]  # untyped when `.[bench]` is absent
    def sum(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    async def run() -> Sample:
        client = AsyncOpenAI(base_url=base_url, api_key="scripted")
        agent = Agent(
            name="bench",
            instructions="Count.",
            tools=[sum],
            model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        )
        with timed() as timer:
            await Runner.run(agent, prompt(turns), max_turns=turns + 2)
        await client.close()
        return timer.sample

    return asyncio.run(run())


def pydantic_ai_loop(base_url: str, turns: int) -> Sample:
    """Pydantic AI's agent loop, through its OpenAI chat model, on the same server."""
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    async def run() -> Sample:
        client = AsyncOpenAI(base_url=base_url, api_key="scripted")
        model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
        agent = Agent(model, instructions="Count.")

        @agent.tool_plain  # type: ignore[untyped-decorator,unused-ignore]  # untyped when `.[bench]` is absent
        def sum(a: float, b: float) -> float:
            """Add two numbers."""
            return a + b

        with timed() as timer:
            # Its default stops at 50 model requests: a 50-turn run makes 51.
            await agent.run(prompt(turns), usage_limits=UsageLimits(request_limit=turns + 2))
        await client.close()
        return timer.sample

    return asyncio.run(run())


def peer_loops(base_url: str, turns: int) -> dict[str, Callable[[], Sample]]:
    """The installed peers' loops, by name, each running `turns` tool turns."""
    loops = {"agents": agents_sdk_loop, "pydantic_ai": pydantic_ai_loop}
    missing = missing_peers()
    return {name: partial(loop, base_url, turns) for name, loop in loops.items() if name not in missing}
