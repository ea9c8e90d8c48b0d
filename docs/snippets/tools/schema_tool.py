from toolpipe import SchemaError, schema_tool

lookup = schema_tool(
    {
        "name": "crm.customers.lookup",  # dots are not allowed on the wire: mapped, and back
        "description": "Find a customer.",
        "parameters": {
            "properties": {"email": {"type": "str"}, "limit": {"type": "int"}},
            "required": ["email"],
        },
    },
    lambda args: {"email": args["email"], "found": True},
)
assert lookup.name == "crm_customers_lookup" and lookup.source_name == "crm.customers.lookup"
assert lookup.parameters["properties"]["email"] == {"type": "string"}  # loose types normalised

try:
    schema_tool({"properties": {"n": {"type": "quaternion"}}}, print, name="bad", description="Bad.")
except SchemaError as e:
    assert str(e) == "tool 'bad': unknown type 'quaternion' at properties/n"  # rejected at registration
