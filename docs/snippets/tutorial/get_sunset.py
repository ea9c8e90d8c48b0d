from toolpipe import tool


@tool
def get_sunset(city: str) -> str:
    """Get today's sunset time in a city.

    Args:
        city: The city's name.
    """
    return f"{city}: sunset at 21:14"
