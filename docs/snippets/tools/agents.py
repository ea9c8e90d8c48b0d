from pydantic import BaseModel

from toolpipe import Agent, BeforeTool, Hooks, ModelPrice, agent_tool

# Another registered agent as a tool: each call is a child run (own execution, history and
# limits); the parent's call waits on its task token and gets the child's answer.
ask_assistant = agent_tool("assistant", name="ask_assistant", description="Ask the general assistant.")
assert list(ask_assistant.parameters["properties"]) == ["task"]


class Receipt(BaseModel):
    order: str
    total_eur: float


class NoDeletes(Hooks):
    def before_tool(self, event: BeforeTool) -> None:
        if event.call.name.startswith("delete_"):
            event.blocked = "deleting is not allowed here"  # the model reads this as the result


shop = Agent(
    name="shop",
    instructions="You help customers with orders.",
    # Not render_invoice: a return_direct tool's text would be the answer, and this agent's
    # answer must be Receipt JSON; an agent with both is refused when it is defined.
    tools=[add_to_cart, list_orders, lookup, ask_assistant],
    on_tool_error="generic",  # "message" (default) | "generic" | "fail"
    max_iterations=8,
    max_calls_per_turn=5,
    max_tool_calls=20,
    max_repair_turns=2,  # turns with invalid calls or answers
    max_identical_calls=3,
    max_agent_depth=2,  # agent tools below this agent's runs nest at most 2 deep
    max_tokens=50_000,
    price=ModelPrice(input_per_million=0.15, output_per_million=0.60),
    max_cost_usd=0.05,
    output_type=Receipt,  # the final answer must be this JSON; it is validated and repaired
    hooks=[NoDeletes()],
    tool_provider=lambda prompt, caller: (
        ["list_orders", "crm_customers_lookup"] if "order" in prompt else ["add_to_cart"]
    ),
)
