"""The agent's `before_tool` and `after_tool` hooks around one call: the worker runs them around
every call it executes, the model step around a deferred call before it waits (one copy)."""

from toolpipe.shared.agents import AfterTool, Agent, BeforeTool
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.tools import ToolContext
from toolpipe.shared.tools.registry import Execution
from toolpipe.shared.tools.tool import to_model_text


def before_hooks(agent: Agent, call: ToolCall, context: ToolContext) -> tuple[ToolCall, Execution | None]:
    """The call as the `before_tool` hooks leave it, and their answer if they gave one."""
    before = BeforeTool(run_id=context.run_id, agent=agent.name, call=call, context=context)
    for hooks in agent.hooks:
        hooks.before_tool(before)
        if before.blocked is not None or before.result is not None:
            break
    if before.blocked is not None:
        return before.call, Execution.failed(ErrorKind.BLOCKED, f"Blocked: {before.blocked}")
    if before.result is not None:
        # A hook may answer with any value a tool may return (a dict, a number): the model reads
        # it as it would the tool's own.
        return before.call, Execution(to_model_text(before.result), "ok", 0)
    return before.call, None


def after_hooks(agent: Agent, call: ToolCall, execution: Execution, context: ToolContext) -> Execution:
    """The call's outcome as the `after_tool` hooks leave it."""
    after = AfterTool(run_id=context.run_id, agent=agent.name, call=call, execution=execution)
    for hooks in agent.hooks:
        hooks.after_tool(after)
    return after.execution
