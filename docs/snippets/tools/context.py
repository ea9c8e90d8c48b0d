from toolpipe import ToolContext, tool


@tool(timeout_seconds=5, retry_on=(ConnectionError,), max_retries=2)
def add_to_cart(sku: str, ctx: ToolContext) -> str:
    """Add an item to the caller's cart.

    Args:
        sku: The product code.
    """
    cart = [*ctx.state.get("cart", []), sku]
    ctx.state["cart"] = cart
    return f"{ctx.caller}'s cart: {', '.join(cart)}"


context = ToolContext(run_id="r1", agent="shop", call_id="c1", caller="ana")
assert add_to_cart.invoke('{"sku": "A-1"}', context) == "ana's cart: A-1"
assert "ctx" not in add_to_cart.spec()["function"]["parameters"]["properties"]


@tool(result_converter=lambda rows: "\n".join(f"- {r}" for r in rows))
def list_orders() -> list[str]:
    """List the caller's open orders."""
    return ["#1001", "#1002"]


assert list_orders.invoke("{}") == "- #1001\n- #1002"


@tool(return_direct=True)
def render_invoice(order: str) -> str:
    """Render an invoice; the text is the run's answer, with no further model call.

    Args:
        order: The order number.
    """
    return f"Invoice for {order}: 42.00 EUR"
