"""The offline demo model answers the docs' demo prompts as a model would."""

from datetime import datetime
from typing import Any

from toolpipe.infra.local.scripted_model import DemoResponder

ASSISTANT_TOOLS = ["sum", "square_root", "get_current_date_time", "set_alarm"]


def _calls(prompt: str, tools: list[str] = ASSISTANT_TOOLS) -> list[tuple[str, dict[str, Any]]]:
    request = {
        "messages": [
            {"role": "system", "content": "The user's time zone is Europe/Paris."},
            {"role": "user", "content": prompt},
        ],
        "tools": [{"type": "function", "function": {"name": name}} for name in tools],
    }
    reply = DemoResponder()(request)
    return list(getattr(reply, "tool_calls", []))


def test_a_time_with_an_offset_is_not_a_sum() -> None:
    # "07:30:00+01:00" holds "00+01": the alarm prompt used to add 0 and 1 too.
    assert _calls("Set an alarm at 2030-01-02T07:30:00+01:00") == [
        ("set_alarm", {"time": "2030-01-02T07:30:00+01:00"})
    ]
    assert _calls("What is 2+3 and 4 + 5?") == [("sum", {"a": 2.0, "b": 3.0}), ("sum", {"a": 4.0, "b": 5.0})]


def test_an_alarm_at_a_clock_time_is_its_next_occurrence() -> None:
    [(name, arguments)] = _calls("Set an alarm at 07:30")
    ring = datetime.fromisoformat(arguments["time"])
    assert name == "set_alarm" and (ring.hour, ring.minute) == (7, 30)
    assert ring > datetime.now(ring.tzinfo) and (ring - datetime.now(ring.tzinfo)).days == 0
    assert str(ring.tzinfo) in ("UTC+01:00", "UTC+02:00")  # Paris, winter or summer


def test_only_the_tools_the_request_offers_are_called() -> None:
    assert _calls("What is 2+3 and the square root of 16?", ["square_root"]) == [("square_root", {"x": 16.0})]
    assert _calls("What is 2+3?", ["get_weather"]) == []


def test_an_email_prompt_calls_send_email_when_it_is_offered() -> None:
    prompt = "Email ana@example.com saying the report is ready."
    assert _calls(prompt, [*ASSISTANT_TOOLS, "send_email"]) == [
        (
            "send_email",
            {"to": "ana@example.com", "subject": "the report is ready.", "body": "the report is ready."},
        )
    ]
    assert _calls(prompt) == []  # not offered: not called
