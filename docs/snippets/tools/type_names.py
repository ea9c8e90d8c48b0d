from toolpipe import schema_tool

rental = schema_tool(
    {
        "properties": {
            "car": {"type": "HashMap", "default": {"type": "sedan"}},  # the default is data
            "pickup": {"type": "LocalDate"},
            "seats": {"type": ["Short", "null"]},
        }
    },
    lambda args: args,
    name="rent_car",
    description="Rent a car.",
)
assert rental.parameters["properties"] == {
    "car": {"type": "object", "default": {"type": "sedan"}},
    "pickup": {"type": "string", "format": "date"},
    "seats": {"type": ["integer", "null"]},
}
