import logging

from pydantic import BaseModel

from toolpipe import Agent, Handoff, HandoffContext, ToolContext, remove_tool_calls, tool


class Escalation(BaseModel):
    reason: str


def log_handoff(context: HandoffContext, given: BaseModel | None) -> None:
    logging.getLogger("shop").info("%s -> %s: %s", context.from_agent, context.to_agent, given)


@tool
def refund(order: str, ctx: ToolContext) -> str:
    """Refund an order, then give the conversation back.

    Args:
        order: The order's id.
    """
    ctx.actions.escalate = True  # back to the agent that handed the run over
    return f"refunded {order}"


billing = Agent(
    name="billing",
    instructions="You handle refunds.",
    tools=[refund],
    description="Refunds and invoices.",
)

front_desk = Agent(
    name="front_desk",
    instructions="Route each request to the agent that can do it.",
    handoffs=[
        billing,  # offered as transfer_to_billing
        # The model must give a reason; on_handoff runs before the switch (if it raises, the
        # model reads why and nothing moves); shop reads the earlier turns without tool calls.
        Handoff("shop", input_type=Escalation, on_handoff=log_handoff, input_filter=remove_tool_calls),
    ],
)
