"""The counters' item stays one write unit whatever a run does: a fixed set of attributes."""

from toolpipe.shared.costs.dynamodb_units import WRITE_UNIT_BYTES, item_size
from toolpipe.shared.costs.operations import COUNTER_NAMES, FUNCTION_ROLES, FunctionUse, Operations


def test_counters_round_trip_through_the_item() -> None:
    ops = Operations(
        state_transitions=3, read_units=1.5, functions={"api": FunctionUse(requests=1, mb_ms=512)}
    )
    assert Operations.from_counters(ops.counters()) == ops
    assert ops + ops == Operations(
        state_transitions=6, read_units=3.0, functions={"api": FunctionUse(requests=2, mb_ms=1024)}
    )


def test_the_largest_counters_item_is_under_one_write_unit() -> None:
    huge = "9" * 20  # counters far beyond any run
    item = {"pk": {"S": "RUN#" + "f" * 64}, "sk": {"S": "COST"}}
    item |= {name: {"N": huge} for name in COUNTER_NAMES}
    for role in FUNCTION_ROLES:
        item |= {f"fn_req#{role}": {"N": huge}, f"fn_mbms#{role}": {"N": huge}}
    assert item_size(item) < WRITE_UNIT_BYTES
