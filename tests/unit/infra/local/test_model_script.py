"""A model scripted in a file: its checks (one line naming the file and the field), which script
plays, which reply, and what is substituted in it."""

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.local.model_script import WHEN_SECONDS, FileResponder, ModelScriptError, load_script
from toolpipe.infra.local.scripted_model import HttpError, Reply

WEATHER = """\
scripts:
  - when: 'weather in (?P<city>[A-Za-z ]+)'
    replies:
      - tool_calls:
          - name: get_weather
            arguments: {city: '{city}', days: 2, where: {names: ['{city}', 'x{{y}}']}}
      - content: '{results}'
  - replies:
      - content: 'anything else: {{literal}} {}'
"""


def _file(tmp_path: Path, text: str, name: str = "scripted_model.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _request(prompt: str, *turns: dict[str, Any]) -> dict[str, Any]:
    return {
        "messages": [{"role": "system", "content": "You help."}, {"role": "user", "content": prompt}, *turns]
    }


def _assistant(*calls: tuple[str, str]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for call_id, name in calls
        ],
    }


def _tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _error(tmp_path: Path, text: str) -> str:
    path = _file(tmp_path, text)
    with pytest.raises(ModelScriptError) as raised:
        load_script(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message.removeprefix(f"{path}: ")


# Each line ten times the last: 10**8 strings once expanded, a few hundred bytes written.
_LAUGHS = (
    "".join(f"x{n}: &x{n} [{', '.join([f'*x{n - 1}' if n else 'ha'] * 10)}]\n" for n in range(8))
    + "scripts: [{replies: [{tool_calls: [{name: f, arguments: {a: *x7}}]}]}]\n"
)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "scripts:\n  - replies:\n      - content: x\n      - tool_calls: [{arguments: {}}]\n",
            "scripts[0].replies[1].tool_calls[0]: 'name' is required",
        ),
        (
            "scripts:\n  - replies:\n      - tool_call: []\n",
            "scripts[0].replies[0]: unknown field 'tool_call'",
        ),
        ("scripts:\n  - replies: [{}]\n", "scripts[0].replies[0]: a reply needs content or tool_calls"),
        ("scripts:\n  - when: x\n    replies: []\n", "scripts[0].replies: is empty"),
        ("scripts: []\n", "scripts: is empty"),
        ("{}\n", "the file: 'scripts' is required"),
        ("- a\n", "a scripted model is a mapping with a `scripts` list"),
        ("", "a scripted model is a mapping with a `scripts` list"),
        ("scripts: [\n", "not YAML (line 2): expected the node content, but found '<stream end>'"),
        (
            "scripts:\n  - replies: [{tool_calls: [{name: f, arguments: [1]}]}]\n",
            "scripts[0].replies[0].tool_calls[0].arguments: Input should be a valid dictionary",
        ),
        (
            "scripts:\n  - when: 'in (?P<city>\\w+)'\n    replies:\n      - content: {results}\n",
            "scripts[0].replies[0].content: {results} without quotes is a YAML mapping: write '{results}'",
        ),
        (
            "scripts:\n  - when: 'in (?P<city>\\w+)'\n    replies:\n      - tool_calls: [{name: f, arguments: {city: {city}}}]\n",
            "scripts[0].replies[0].tool_calls[0].arguments.city: {city} without quotes is a YAML mapping: "
            "write '{city}'",
        ),
        (
            "scripts:\n  - when: '(?P<results>x)'\n    replies: [{content: a}]\n",
            "scripts[0].when: a group named 'results' would hide {results}: rename it",
        ),
        ("scripts: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply to read"),
        (_LAUGHS, "more than 100,000 values once its aliases (*name) are expanded"),
        ("scripts: &s [{replies: *s}]\n", "more than 100,000 values once its aliases (*name) are expanded"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_field(tmp_path: Path, text: str, error: str) -> None:
    assert _error(tmp_path, text) == error


def test_a_file_nested_too_deeply_is_refused_whatever_the_recursion_limit(tmp_path: Path) -> None:
    """A library the process loaded may raise the interpreter's limit (hypothesis does, for its
    tests): the parse then succeeds, and the depth is what refuses it."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(50_000)
    try:
        assert _error(tmp_path, "scripts: " + "[" * 5000 + "]" * 5000 + "\n") == "nested too deeply to read"
    finally:
        sys.setrecursionlimit(limit)


def test_the_loader_stops_at_the_depth_it_refuses_not_at_the_end_of_the_file() -> None:
    """PyYAML reads a file quadratically in its depth: one 5,000 deep took 9 s of CPU to read.
    The loader refuses a value inside more than MAX_DEPTH lists as it reaches it."""
    import yaml

    from toolpipe.infra.local.model_script import MAX_DEPTH, _ShallowLoader, _TooDeep

    deepest = "[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH  # 1 is inside MAX_DEPTH lists: allowed
    assert yaml.load(deepest, Loader=_ShallowLoader) is not None  # a SafeLoader
    with pytest.raises(_TooDeep):
        yaml.load("[" + deepest + "]", Loader=_ShallowLoader)
    with pytest.raises(yaml.constructor.ConstructorError):  # still the safe loader
        yaml.load("!!python/object/apply:os.system ['true']", Loader=_ShallowLoader)


def test_a_bad_regex_and_an_unknown_placeholder_are_named(tmp_path: Path) -> None:
    assert _error(tmp_path, "scripts:\n  - when: '(unclosed'\n    replies: [{content: a}]\n").startswith(
        "scripts[0].when: not a regular expression: missing ) at position 9"
    )
    unknown = "scripts:\n  - when: 'in (?P<city>\\w+)'\n    replies:\n      - content: a\n      - tool_calls: [{name: f, arguments: {q: [x, '{town}']}}]\n"
    assert _error(tmp_path, unknown) == (
        "scripts[0].replies[1].tool_calls[0].arguments: {town} is not a named group of `when` or "
        "{results} (known: {city}, {results}; {{ and }} are literal braces)"
    )


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelScriptError, match=r"cannot read the scripted model: No such file"):
        load_script(tmp_path / "missing.yaml")
    _file(tmp_path, "x").write_bytes(b"\xff\xfe")
    with pytest.raises(ModelScriptError, match="cannot read the scripted model"):
        load_script(tmp_path / "scripted_model.yaml")


def test_aliases_that_repeat_a_reply_are_fine(tmp_path: Path) -> None:
    path = _file(tmp_path, "scripts:\n  - replies: [&hi {content: hi}, *hi]\n")
    assert [reply.content for reply in load_script(path).scripts[0].replies] == ["hi", "hi"]


def test_json_is_yaml_too(tmp_path: Path) -> None:
    path = _file(tmp_path, json.dumps({"scripts": [{"replies": [{"content": "hi"}]}]}), "model.json")
    assert FileResponder(path)(_request("hello")) == Reply(content="hi", tool_calls=[], raw_ids={})


def test_the_first_matching_script_plays_its_replies_by_turn(tmp_path: Path) -> None:
    respond = FileResponder(_file(tmp_path, WEATHER))
    # Case-insensitive search; the named group substituted recursively in arguments' strings
    # only (a number stays a number, keys stay as written), `{{` a literal brace.
    first = respond(_request("What is the WEATHER in Oslo?"))
    assert isinstance(first, Reply) and first.content is None
    assert first.tool_calls == [
        ("get_weather", {"city": "Oslo", "days": 2, "where": {"names": ["Oslo", "x{y}"]}})
    ]
    # The next turn: the previous turn's results, in order, one a line.
    [call_id] = first.raw_ids.values()
    second = respond(
        _request(
            "What is the weather in Oslo?",
            _assistant((call_id, "get_weather"), ("c2", "get_weather")),
            _tool(call_id, "Oslo: snow"),
            _tool("c2", "Oslo: wind"),
        )
    )
    assert second == Reply(content="Oslo: snow\nOslo: wind", tool_calls=[], raw_ids={})
    # Another prompt: the catch-all script (no `when`); `{}` is no placeholder.
    assert respond(_request("hello")) == Reply(
        content="anything else: {literal} {}", tool_calls=[], raw_ids={}
    )


def test_the_script_is_chosen_by_the_first_user_message(tmp_path: Path) -> None:
    respond = FileResponder(_file(tmp_path, WEATHER))
    later = {"role": "user", "content": "hello"}  # a later user message does not choose
    reply = respond(_request("weather in Lima", later))
    assert isinstance(reply, Reply) and reply.tool_calls[0][1]["city"] == "Lima"


def test_call_ids_are_deterministic_and_differ_between_turns(tmp_path: Path) -> None:
    text = "scripts:\n  - replies:\n      - tool_calls: [{name: a}, {name: b}]\n      - tool_calls: [{name: a}]\n"
    respond = FileResponder(_file(tmp_path, text))
    first, again = respond(_request("x")), respond(_request("x"))
    assert isinstance(first, Reply) and isinstance(again, Reply)
    assert first.raw_ids == again.raw_ids and len(set(first.raw_ids.values())) == 2
    assert first.tool_calls == [("a", {}), ("b", {})]
    ids = list(first.raw_ids.values())
    second = respond(
        _request("x", _assistant((ids[0], "a"), (ids[1], "b")), _tool(ids[0], "1"), _tool(ids[1], "2"))
    )
    assert isinstance(second, Reply) and not set(second.raw_ids.values()) & set(ids)


def test_no_match_or_no_reply_left_is_a_400_naming_the_file_and_the_prompt(tmp_path: Path) -> None:
    path = _file(tmp_path, "scripts:\n  - when: weather\n    replies: [{content: sunny}]\n")
    respond = FileResponder(path)
    unmatched = respond(_request("Tell me a long story about a dragon who collects teapots"))
    assert isinstance(unmatched, HttpError) and unmatched.status == 400
    assert unmatched.body["error"]["message"] == (
        f"{path}: no script's `when` matches the prompt 'Tell me a long story about a dragon who…'"
    )
    exhausted = respond(_request("weather?", {"role": "assistant", "content": "sunny"}))
    assert isinstance(exhausted, HttpError) and exhausted.status == 400
    assert exhausted.body["error"]["message"] == (
        f"{path}: scripts[0] has 1 replies, the model is asked for reply 2 of the prompt 'weather?'"
    )


def test_a_when_that_backtracks_for_ever_is_a_400_within_its_timeout(tmp_path: Path) -> None:
    # With `re`, this search holds the interpreter for ever (the server answers nothing more).
    path = _file(tmp_path, "scripts:\n  - when: '^(a|aa)+$'\n    replies: [{content: x}]\n")
    started = time.monotonic()
    refused = FileResponder(path)(_request("a" * 60 + "b"))
    assert time.monotonic() - started < WHEN_SECONDS + 5  # bounded (a loaded machine is slower)
    assert isinstance(refused, HttpError) and refused.status == 400
    assert refused.body["error"]["message"].startswith(
        f"{path}: scripts[0].when took over 1 s on the prompt 'aaaa"
    )


def test_an_edited_file_is_read_again_and_a_broken_edit_is_the_requests_error(tmp_path: Path) -> None:
    path = _file(tmp_path, "scripts:\n  - replies: [{content: one}]\n")
    respond = FileResponder(path)
    assert respond(_request("x")) == Reply(content="one", tool_calls=[], raw_ids={})
    path.write_text("scripts:\n  - replies: [{content: two, extra: 1}]\n")
    broken = respond(_request("x"))
    assert isinstance(broken, HttpError) and broken.status == 400
    assert broken.body["error"]["message"] == f"{path}: scripts[0].replies[0]: unknown field 'extra'"
    path.unlink()
    gone = respond(_request("x"))
    assert isinstance(gone, HttpError) and "cannot read the scripted model" in gone.body["error"]["message"]


def test_the_examples_script_is_valid() -> None:
    example = Path(__file__).resolve().parents[4] / "examples" / "assistant" / "scripted_model.yaml"
    assert len(load_script(example).scripts) == 3
