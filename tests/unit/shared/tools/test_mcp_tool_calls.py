"""What MCP tools rely on in `Tool`: async tools cancelled at their timeout, and errors that
already speak to the model passed on unwrapped."""

import asyncio
import threading

from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.tools import ToolRegistry, schema_tool
from toolpipe.shared.tools.errors import ToolExecutionError


def test_an_async_tool_is_cancelled_at_its_timeout() -> None:
    cancelled = threading.Event()

    async def wait_forever(arguments: dict[str, object]) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()  # where an MCP call closes its connection
            raise
        return "never"

    stall = schema_tool(
        {"properties": {}}, wait_forever, name="stall", description="Wait.", timeout_seconds=0.2
    )

    execution = ToolRegistry([stall]).execute(ToolCall(id="c", name="stall", arguments="{}"))

    assert (execution.content, execution.error_type) == (
        "Error: Tool 'stall' timed out after 0.2 s. It may still take effect: check before calling it again.",
        ErrorKind.TOOL_TIMEOUT,
    )
    assert cancelled.wait(5), "the tool's coroutine was left running after its timeout"


def test_a_tools_own_model_visible_error_reaches_the_model_unwrapped() -> None:
    def refuse(arguments: dict[str, object]) -> str:
        raise ToolExecutionError("Error executing tool fail: quota exceeded")

    tool = schema_tool({"properties": {}}, refuse, name="remote", description="A remote tool.")

    execution = ToolRegistry([tool]).execute(ToolCall(id="c", name="remote", arguments="{}"))

    assert execution.content == "Error: Error executing tool fail: quota exceeded"
    assert execution.error_type is ErrorKind.TOOL_FAILED
