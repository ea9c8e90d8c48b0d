"""A scripted model read from a file: your own tools called offline, from the CLI.

`toolpipe run --scripted-model FILE` (or `[tool.toolpipe] scripted_model` in a project) serves
the file's replies from `ScriptedModelServer` in place of a real model. The format (YAML; JSON
is YAML too):

```yaml
scripts:
  - when: 'weather in (?P<city>[A-Za-z ]+)'   # searched in the prompt, case-insensitive; omitted: any
    replies:
      - tool_calls:
          - name: get_weather
            arguments: {city: '{city}'}          # {name}: the named group of `when`
      - content: '{results}'                    # {results}: the previous turn's tool results
```

The responder keeps no state: each request carries its conversation, so the script is chosen
by the conversation's first user message and the reply by how many assistant messages the
model is shown. A run's replies are one list, whichever agent asks: after a transfer, the next
reply is the agent handed to's. (A handoff `input_filter` that hides earlier replies from the
new agent hides them from the count too.) A child run (an agent tool) is a conversation of its
own, started by the input its parent gave: a script whose `when` matches that input plays it.
So a server restarted mid-run, or serving runs in parallel, plays each run's script in place.

No script matching, or no reply left, is an HTTP 400 the `openai` client does not retry: the
run fails with the message, naming the file and the prompt, as a model that refused would.
"""

import hashlib
import json
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import regex
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from toolpipe.infra.local.scripted_model import HttpError, Reply, prompt_preview
from toolpipe.shared.errors import ConfigurationError

if TYPE_CHECKING:
    from toolpipe.shared.agents.agent import Agent

# `{name}` is a substitution, `{{` and `}}` literal braces (as in Python's str.format).
# `when` runs in the `regex` package, not `re`: its search takes a timeout. A pattern that
# backtracks catastrophically ((a+)+ on "aaaa…b") would otherwise hold `re`'s match, and the
# interpreter lock with it, for ever: the local server would answer nothing and ignore SIGTERM.
# VERSION0: the syntax of `re`, which the docs describe.
_WHEN_FLAGS = regex.IGNORECASE | regex.VERSION0
WHEN_SECONDS = 1.0
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{(\w+)\}")
RESULTS = "results"
# A script is a few kilobytes. YAML aliases (`*name`) may repeat a value many times over (a
# "billion laughs"), or hold themselves: past this many values the checks and every reply built
# from the file would take hours, or never end.
MAX_VALUES = 100_000
# How deep lists and mappings may nest: a script's deepest value (a reply's tool call's
# arguments) is a few levels down; arguments of their own may nest a few dozen more.
MAX_DEPTH = 100


class ModelScriptError(ConfigurationError):
    """The file is not a model script: one line naming the file and what is wrong."""


class _Below(ValueError):
    """A problem a model's validator finds in one of its fields: `where` (`replies[1].content`)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedCall(_Strict):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptedReply(_Strict):
    content: str | None = None
    tool_calls: list[ScriptedCall] = Field(default_factory=list)

    @model_validator(mode="after")
    def _says_something(self) -> "ScriptedReply":
        if self.content is None and not self.tool_calls:
            raise ValueError("a reply needs content or tool_calls")
        return self


class Script(_Strict):
    when: str | None = None
    replies: list[ScriptedReply] = Field(min_length=1)

    @field_validator("when")
    @classmethod
    def _compiles(cls, when: str | None) -> str | None:
        if when is not None:
            try:
                compiled = regex.compile(when, _WHEN_FLAGS)
            except regex.error as e:
                raise ValueError(f"not a regular expression: {e}") from None
            if RESULTS in compiled.groupindex:
                raise ValueError("a group named 'results' would hide {results}: rename it")
        return when

    @model_validator(mode="after")
    def _placeholders_are_known(self) -> "Script":
        groups = set(regex.compile(self.when, _WHEN_FLAGS).groupindex) if self.when is not None else set()
        for r, reply in enumerate(self.replies):
            texts = [("content", reply.content)] if reply.content is not None else []
            for c, call in enumerate(reply.tool_calls):
                texts += [(f"tool_calls[{c}].arguments", s) for s in _strings(call.arguments)]
            for where, text in texts:
                for name in _names(text):
                    if name != RESULTS and name not in groups:
                        known = ", ".join(f"{{{g}}}" for g in [*sorted(groups), RESULTS])
                        raise _Below(
                            f"replies[{r}].{where}",
                            f"{{{name}}} is not a named group of `when` or {{results}} "
                            f"(known: {known}; {{{{ and }}}} are literal braces)",
                        )
        return self


class ModelScriptFile(_Strict):
    scripts: list[Script] = Field(min_length=1)


def _strings(value: Any) -> list[str]:
    """Every string in a JSON-like value, keys left out."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _names(text: str) -> list[str]:
    return [m.group(1) for m in _PLACEHOLDER.finditer(text) if m.group(1) is not None]


def _substitute(value: Any, values: dict[str, str]) -> Any:
    """`value` with `{name}` replaced in every string, recursively (keys kept as written)."""
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            token = match.group(0)
            if token in ("{{", "}}"):
                return token[0]
            return values.get(match.group(1), "")

        return _PLACEHOLDER.sub(replace, value)
    if isinstance(value, dict):
        return {k: _substitute(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    return value


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _one_line(path: Path, error: ValidationError) -> str:
    """The first problem pydantic found, as `file: scripts[0].replies[1]: what`."""
    first = error.errors()[0]
    loc = tuple(first["loc"])
    if first["type"] == "missing":
        return f"{path}: {_where(loc[:-1]) or 'the file'}: '{loc[-1]}' is required"
    if first["type"] == "too_short":
        return f"{path}: {_where(loc)}: is empty"
    if first["type"] == "extra_forbidden":
        return f"{path}: {_where(loc[:-1]) or 'the file'}: unknown field '{loc[-1]}'"
    below = first.get("ctx", {}).get("error")
    if isinstance(below, _Below):
        return f"{path}: {_where(loc)}.{below.where}: {below}"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{path}: {_where(loc) or 'the file'}: {message}"


def load_script(path: Path) -> ModelScriptFile:
    """The file, parsed and checked.

    Raises:
        ModelScriptError: unreadable, not YAML, or not a model script (the first problem found).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ModelScriptError(f"{path}: cannot read the scripted model: {reason}") from None
    try:
        data = yaml.load(text, Loader=_ShallowLoader)  # a SafeLoader
    except (RecursionError, _TooDeep):
        raise ModelScriptError(f"{path}: nested too deeply to read") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ModelScriptError(f"{path}: not YAML{line}: {' '.join(str(problem).split())}") from None
    if not isinstance(data, dict):
        raise ModelScriptError(f"{path}: a scripted model is a mapping with a `scripts` list")
    if _expands_past(data, MAX_VALUES):
        raise ModelScriptError(
            f"{path}: more than {MAX_VALUES:,} values once its aliases (*name) are expanded"
        )
    if _deeper_than(data, MAX_DEPTH):
        # Whatever the interpreter's recursion limit (a library may raise it): a script is
        # shallow, and what checks it next walks it recursively (counted first: at most MAX_VALUES).
        raise ModelScriptError(f"{path}: nested too deeply to read")
    unquoted = _unquoted_placeholder(data)
    if unquoted is not None:
        where, name = unquoted
        raise ModelScriptError(
            f"{path}: {where}: {{{name}}} without quotes is a YAML mapping: write '{{{name}}}'"
        )
    try:
        return ModelScriptFile.model_validate(data)
    except ValidationError as e:
        raise ModelScriptError(_one_line(path, e)) from None


class _TooDeep(Exception):
    pass


class _ShallowLoader(yaml.SafeLoader):
    """The safe loader, refusing a value nested more than MAX_DEPTH deep as it reaches it, not
    once the whole file is read: PyYAML's scanner slows quadratically with depth (a file 5,000
    brackets deep took 9 s of CPU to read, ~0.35 s to refuse). Values an alias repeats are
    counted by `_deeper_than` after the load."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0  # the node being composed: the document's is 1

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH + 1:  # inside more than MAX_DEPTH lists and mappings
                raise _TooDeep
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether `data` nests lists and mappings more than `limit` deep (a walk that stops there)."""
    pending = [(data, 0)]
    while pending:
        value, depth = pending.pop()
        if depth > limit:
            return True
        if isinstance(value, dict):
            pending.extend((inner, depth + 1) for inner in value.values())
        elif isinstance(value, list):
            pending.extend((inner, depth + 1) for inner in value)
    return False


def _expands_past(data: Any, limit: int) -> bool:
    """Whether `data` holds more than `limit` values, each alias counted as often as it is used
    (a walk that stops at the limit: a value holding itself is not followed forever)."""
    pending, seen = [data], 0
    while pending:
        value = pending.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(value, dict):
            pending.extend([*value.keys(), *value.values()])
        elif isinstance(value, list):
            pending.extend(value)
    return False


def _placeholder_mapping(value: Any) -> str | None:
    """The name, when `value` is what YAML makes of an unquoted `{name}`: `{name: None}`."""
    if isinstance(value, dict) and len(value) == 1:
        [(key, inner)] = value.items()
        if inner is None and isinstance(key, str) and key.isidentifier():
            return key
    return None


def _listed(value: Any, key: str) -> list[Any]:
    """`value[key]` if `value` is a mapping holding a list there, else [] (raw YAML, unchecked)."""
    listed = value.get(key) if isinstance(value, dict) else None
    return listed if isinstance(listed, list) else []


def _unquoted_placeholder(data: dict[str, Any]) -> tuple[str, str] | None:
    """Where a reply's content or an argument's value is an unquoted `{name}`, and the name.

    A sloppy `content: {results}` would otherwise be "not a valid string", and an argument
    `{city: {city}}` a mapping sent to the tool."""
    found: list[tuple[str, Any]] = []
    for s, script in enumerate(_listed(data, "scripts")):
        for r, reply in enumerate(_listed(script, "replies")):
            where = f"scripts[{s}].replies[{r}]"
            found.append((f"{where}.content", reply.get("content") if isinstance(reply, dict) else None))
            for c, call in enumerate(_listed(reply, "tool_calls")):
                arguments = call.get("arguments") if isinstance(call, dict) else None
                for key, value in (arguments if isinstance(arguments, dict) else {}).items():
                    found.append((f"{where}.tool_calls[{c}].arguments.{key}", value))
    return next(((where, name) for where, v in found if (name := _placeholder_mapping(v))), None)


def _refusal(message: str) -> HttpError:
    # 400: the `openai` client does not retry it, and the orchestrator fails the run with it.
    return HttpError(400, {"error": {"message": message, "type": "invalid_request_error"}})


class FileResponder:
    """Answers a `ScriptedModelServer`'s requests from a model script file.

    The file is read at the first request and again whenever it changes, so an edit shows in
    the next run even on a server that was already serving; a file that is broken then, or that
    calls a tool its agent lacks (checked against `agents()`, when given: script_tools.py), is
    that request's error (commands check it before starting a server: `checked_scripted_model`).
    """

    def __init__(self, path: Path, agents: "Callable[[], Sequence[Agent]] | None" = None) -> None:
        self.path = path.absolute()
        self._agents = agents
        self._lock = threading.Lock()
        self._version: tuple[int, int] | None = None
        self._script: ModelScriptFile | None = None

    def _current(self) -> ModelScriptFile:
        stat = self.path.stat() if self.path.exists() else None
        version = (stat.st_mtime_ns, stat.st_size) if stat is not None else None
        with self._lock:
            if self._script is None or version != self._version:
                script = load_script(self.path)
                if self._agents is not None:
                    from toolpipe.infra.local.script_tools import check_script_tools

                    check_script_tools(self.path, script, self._agents())
                self._script, self._version = script, version
            return self._script

    def __call__(self, request: dict[str, Any]) -> Reply | HttpError:
        try:
            script = self._current()
        except ModelScriptError as e:
            return _refusal(str(e))
        messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        prompt = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
        for s, candidate in enumerate(script.scripts):
            try:
                match = regex.search(candidate.when or "", prompt, _WHEN_FLAGS, timeout=WHEN_SECONDS)
            except TimeoutError:
                return _refusal(
                    f"{self.path}: scripts[{s}].when took over {WHEN_SECONDS:g} s on the prompt "
                    f"{prompt_preview(prompt)}: simplify it (nested repeats such as (a+)+ backtrack)"
                )
            if match is not None:
                return self._play(s, candidate, match, messages, prompt)
        return _refusal(f"{self.path}: no script's `when` matches the prompt {prompt_preview(prompt)}")

    def _play(
        self, s: int, script: Script, match: "regex.Match[str]", messages: list[dict[str, Any]], prompt: str
    ) -> Reply | HttpError:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn >= len(script.replies):
            return _refusal(
                f"{self.path}: scripts[{s}] has {len(script.replies)} replies, the model is asked "
                f"for reply {turn + 1} of the prompt {prompt_preview(prompt)}"
            )
        values = {k: v or "" for k, v in match.groupdict().items()}
        values[RESULTS] = "\n".join(_last_results(messages))
        reply = script.replies[turn]
        # Deterministic ids, unique in the conversation: the same request gets the same ids.
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]
        return Reply(
            content=_substitute(reply.content, values),
            tool_calls=[(c.name, _substitute(c.arguments, values)) for c in reply.tool_calls],
            raw_ids={i: f"call_{digest}_{i}" for i in range(len(reply.tool_calls))},
        )


def _last_results(messages: list[dict[str, Any]]) -> list[str]:
    """The contents of the tool messages after the last assistant message, in order."""
    results: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(str(message.get("content") or ""))
    return results[::-1]
