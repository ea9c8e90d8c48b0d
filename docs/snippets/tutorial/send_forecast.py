from toolpipe import tool


@tool(requires_approval=True)  # every call waits for a person
def send_forecast(email: str, city: str) -> str:
    """Email today's forecast for a city.

    Args:
        email: Who gets it.
        city: The city's name.
    """
    return f"sent the forecast for {city} to {email}"
