"""Another agent as a tool: each call is a child run through the same pipeline."""

import dataclasses
from typing import Annotated

from toolpipe.shared.tools import Param, Tool, tool
from toolpipe.shared.tools.tool import ApprovalPolicy


def agent_tool(
    agent: str,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | ApprovalPolicy = False,
) -> Tool:
    """A tool that hands a task to the agent registered as `agent`.

    The call runs as a child run (its own execution, history and limits); the parent's call
    waits on its task token and gets the child's answer, or an error result if the child
    ends any other way. `requires_approval` gates each call on a person's decision, as for
    any tool.
    """

    def delegate(
        task: Annotated[str, Param("The whole task, with everything the agent needs to know.")],
    ) -> str:
        raise RuntimeError("an agent tool runs as a child run of the pipeline, never in-process")

    built = tool(
        name=name or agent,
        description=description or f"Hand a task to the '{agent}' agent; it works on it and answers in text.",
    )(delegate)
    return dataclasses.replace(built, child_agent=agent, requires_approval=requires_approval)
