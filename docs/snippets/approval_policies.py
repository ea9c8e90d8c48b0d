from toolpipe import ToolContext, tool


@tool(requires_approval=True)  # every call waits for a person
def delete_account(account_id: str) -> str:
    """Delete a customer's account.

    Args:
        account_id: The account.
    """
    return f"deleted {account_id}"


def over_100(arguments: dict[str, object], ctx: ToolContext) -> bool:
    return float(str(arguments["amount"])) > 100  # the validated arguments, coerced


@tool(requires_approval=over_100)  # only refunds above 100 wait
def refund(order: str, amount: float) -> str:
    """Refund an order.

    Args:
        order: The order number.
        amount: How much, in euros.
    """
    return f"refunded {amount} on {order}"


context = ToolContext(run_id="r1", agent="shop", call_id="c1", caller="ana")
assert refund.needs_approval(refund.parse_arguments('{"order": "A1", "amount": "250"}'), context)
assert not refund.needs_approval(refund.parse_arguments('{"order": "A1", "amount": 20}'), context)
