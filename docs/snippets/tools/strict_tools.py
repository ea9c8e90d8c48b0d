from toolpipe import DefinitionError, tool


@tool(strict=True)
def book_room(hotel: str, nights: int = 1, note: str | None = None) -> str:
    """Book a hotel room.

    Args:
        hotel: The hotel's name.
        nights: How many nights.
    """
    return f"{hotel}: {nights} night(s)" + (f", {note}" if note else "")


function = book_room.spec()["function"]
assert function["strict"] is True
assert function["parameters"]["required"] == ["hotel", "nights", "note"]
assert function["parameters"]["properties"]["nights"] == {
    "description": "How many nights. Default: 1.",  # OpenAI refuses `default` in strict schemas
    "type": ["integer", "null"],
}
assert book_room.invoke('{"hotel": "Savoy", "nights": null, "note": null}') == "Savoy: 1 night(s)"


def tag(labels: dict[str, str]) -> None:
    """Tag something."""


try:
    tool(strict=True)(tag)  # free-form keys: strict mode cannot say which
except DefinitionError as e:
    assert str(e).startswith("tool 'tag' cannot be strict: properties/labels: an object with free-form keys")
else:
    raise AssertionError("a strict tool with free-form keys was accepted")
