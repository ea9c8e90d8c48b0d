from toolpipe import Agent, tool
from toolpipe.testing import LocalPipeline, Reply, call


@tool
def get_weather(city: str) -> str:
    """Get today's weather in a city.

    Args:
        city: The city's name.
    """
    return f"{city}: sunny, 21 °C"


@tool(requires_approval=True)  # every call waits for a person's yes or no
def book_table(restaurant: str, people: int) -> str:
    """Book a table at a restaurant.

    Args:
        restaurant: The restaurant's name.
        people: How many people.
    """
    return f"booked {restaurant} for {people}"


concierge = Agent(name="concierge", instructions="Plan the evening.", tools=[get_weather, book_table])

if __name__ == "__main__":  # one run, offline: the whole pipeline in this process, the model scripted
    with LocalPipeline(app="__main__") as pipeline:
        pipeline.script(
            Reply(
                tool_calls=[
                    call("get_weather", city="Paris"),
                    call("book_table", restaurant="Chez Ana", people=2),
                ]
            ),
            Reply(content="Sunny tonight; your table at Chez Ana is booked."),
        )
        run = pipeline.run(
            "Dinner for two in Paris tonight?", decide=lambda approval: True
        )  # a person approves
    print(run.status, run.tool_results)  # succeeded ['Paris: sunny, 21 °C', 'booked Chez Ana for 2']
