# toolpipe's internal registry, imported here only to show the mapping a run uses.
from toolpipe import schema_tool
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.tools import ToolRegistry

book_v2 = schema_tool({"properties": {}}, lambda args: "v2", name="flight.book", description="Book (v2).")
book_v1 = schema_tool({"properties": {}}, lambda args: "v1", name="flight_book", description="Book (v1).")
registry = ToolRegistry([book_v2, book_v1])  # either order gives the same names
assert registry.names == ["flight_book_74424e40", "flight_book"]
for called, answer in [("flight_book_74424e40", "v2"), ("flight.book", "v2"), ("flight_book", "v1")]:
    assert registry.execute(ToolCall(id="1", name=called, arguments="{}")).content == answer
