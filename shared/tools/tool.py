"""A plain typed, documented Python function becomes a tool with a JSON schema."""

import asyncio
import inspect
import json
import math
import threading
import time
import types
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from toolpipe.shared.errors import (
    DefinitionError,
    ModelVisibleError,
    describe_exception,
    describe_validation_error,
)
from toolpipe.shared.tools.context import ToolContext
from toolpipe.shared.tools.errors import InvalidArgumentsError, ToolExecutionError, ToolTimeoutError
from toolpipe.shared.tools.names import WIRE_NAME
from toolpipe.shared.tools.runners import runner_name_problem
from toolpipe.shared.tools.schemas import Path, map_subschemas
from toolpipe.shared.tools.strict import NotStrictError, strict_schema
from toolpipe.shared.tools.time_limit import Overran, run_with_limit
from toolpipe.shared.tools.validation import ArgumentsMismatch, Validator, json_schema_validator


@dataclass(frozen=True)
class Param:
    """Describe a parameter in its annotation: `Annotated[str, Param("The city", required=False)]`.

    `required=False` makes the model free to leave it out (the function then gets its default,
    or None), whatever the type says.
    """

    description: str | None = None
    required: bool = True


# `(arguments, ctx) -> bool`: whether a call with these validated arguments needs a person's approval.
ApprovalPolicy = Callable[[dict[str, Any], ToolContext], bool]

# Who answers a deferred tool's calls instead of a worker: a person ("human": the answer to the
# model's question is the result) or the caller's program ("client": return of control).
Deferred = Literal["human", "client"]
# A deferred call may wait this long at most: Step Functions' own limit for a Standard
# execution (one year). The execution's timeout (infra/cdk/limits.py) ends it sooner.
MAX_WAIT_SECONDS = 365 * 24 * 3600


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    args_model: type[BaseModel] | None = None
    context_param: str | None = None
    result_converter: Callable[[Any], str] | None = None
    timeout_seconds: float | None = None
    # Opt-in: retry these exception types (transient failures) with exponential backoff.
    retry_on: tuple[type[BaseException], ...] = ()
    max_retries: int = 0
    retry_backoff_seconds: float = 0.5
    # Checks the arguments against `parameters` before args_model (if any) sees what it
    # returns: every tool loaded from a JSON Schema, and every strict tool.
    validator: Validator | None = field(default=None, repr=False)
    # The name as written, where the wire name had to differ (see names.py).
    source_name: str | None = None
    # OpenAI structured outputs for the arguments: `parameters` is in the strict subset and the
    # spec says `"strict": true`, so a model that honours it sends only valid arguments.
    strict: bool = False
    # The result is the run's answer: no further model call (e.g. a rendered report).
    return_direct: bool = False
    # Set by agent_tool(): the call runs as a child run of this agent.
    child_agent: str | None = None
    # Safe to run again when a worker died mid-call and nobody knows whether it had its effect
    # (reads, or writes keyed by `ToolContext.idempotency_key`). Otherwise such a call ends
    # "in doubt" instead of running twice.
    idempotent: bool = False
    # A person must approve a call before it runs: True, or a policy of the validated
    # arguments and the call's context (e.g. refunds above 100). The state machine enforces it
    # (the call waits on a task token until decided), never the prompt.
    requires_approval: bool | ApprovalPolicy = field(default=False, compare=False)
    # Answered from outside, never run by a worker: "human" (a person answers the model's
    # question) or "client" (the caller's program posts the result). The call waits on a task
    # token, like an approval, for `wait_seconds` (None: the approval timeout of the settings).
    deferred: Deferred | None = None
    wait_seconds: int | None = None
    # The JSON Schema a deferred call's answer must match (a pydantic model is turned into its
    # schema): a form instead of free text. None: free text ("human"), any JSON ("client").
    result_schema: dict[str, Any] | type[BaseModel] | None = field(default=None, compare=False)
    # The runner (its own Lambda function and role) the tool's code runs in; None: the default
    # runner. Grants for what the tool needs go to that runner's role only (shared/tools/runners.py).
    runner: str | None = None
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_numbers(self)
        if not isinstance(self.requires_approval, bool) and not callable(self.requires_approval):
            raise DefinitionError(
                f"tool '{self.name}': requires_approval is True, False or a function (arguments, ctx) -> bool"
            )
        _check_deferred(self)
        _check_runner(self)
        if isinstance(self.result_schema, type):
            # Frozen: set once, here, so every reader sees one JSON Schema.
            object.__setattr__(self, "result_schema", self.result_schema.model_json_schema())

    def wait_timeout(self, default: int) -> int:
        """How long a deferred call waits for its answer, in seconds."""
        return self.wait_seconds if self.wait_seconds is not None else default

    def needs_approval(self, arguments: dict[str, Any], context: ToolContext) -> bool:
        """Whether this call waits for a person: the policy on the validated arguments. A policy
        that raises or answers something other than a bool fails closed (approval needed)."""
        policy = self.requires_approval
        if isinstance(policy, bool):
            return policy
        try:
            answer = policy(dict(arguments), context)
        except BaseException:  # SystemExit too: a policy cannot end the process that asks it
            return True
        return answer is not False

    def spec(self) -> dict[str, Any]:
        """The entry for the OpenAI `tools` list."""
        function: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.strict:
            function["strict"] = True
        return {"type": "function", "function": function}

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """Validated, coerced keyword arguments, or `InvalidArgumentsError` the model can act on."""
        try:
            raw = json.loads(arguments or "{}")
        except json.JSONDecodeError as e:
            raise InvalidArgumentsError(f"Arguments for '{self.name}' are not valid JSON: {e.msg}.") from e
        except (ValueError, RecursionError) as e:
            # Valid JSON Python will not read: integers past 4,300 digits, nesting past the stack.
            raise InvalidArgumentsError(f"Arguments for '{self.name}' could not be read: {e}.") from e
        if not isinstance(raw, dict):
            raise InvalidArgumentsError(f"Arguments for '{self.name}' must be a JSON object.")
        if self.validator is not None:
            try:
                raw = self.validator(raw)
            except ArgumentsMismatch as e:
                raise InvalidArgumentsError(e.for_model(self.name)) from e
        if self.args_model is None:
            return dict(raw)
        try:
            parsed = self.args_model.model_validate(raw)
        except ValidationError as e:
            details = describe_validation_error(e, "(arguments)")
            raise InvalidArgumentsError(f"Invalid arguments for '{self.name}': {details}.") from e
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    def invoke(
        self, arguments: str, context: ToolContext | None = None, *, time_limit: float | None = None
    ) -> str:
        """Validate, run and convert; model-visible failures raise `ModelVisibleError`.

        `time_limit`: the seconds the caller can wait at most (a worker: the time its invocation
        has left). The call is answered as timed out then, whatever its own timeout, and no
        retry starts after it. Whatever the tool raises, `SystemExit` and `KeyboardInterrupt`
        included, is the call's error: a tool cannot end the process that runs it."""
        kwargs = self.parse_arguments(arguments)
        if self.context_param is not None:
            if context is None:
                raise ToolExecutionError(f"Tool '{self.name}' needs a ToolContext and none was given.")
            kwargs[self.context_param] = context
        deadline = None if time_limit is None else time.monotonic() + time_limit
        attempt = 1
        while True:
            try:
                result = self._run(kwargs, deadline, attempt)
                break
            except KeyboardInterrupt:
                if self._inline(deadline) and threading.current_thread() is threading.main_thread():
                    raise  # Ctrl-C while a script calls the tool itself: the person's, not the tool's
                raise self._failure(KeyboardInterrupt(), attempt) from None
            except BaseException as e:
                if not self._retries(e, attempt, deadline):
                    raise self._failure(e, attempt) from e
                self.sleep(self.retry_backoff_seconds * 2 ** (attempt - 1))
                attempt += 1
        converter = self.result_converter or to_model_text
        return converter(result)

    def _retries(self, error: BaseException, attempt: int, deadline: float | None) -> bool:
        """Whether `error` is worth another attempt. A timed-out attempt may still be running (a
        thread cannot be stopped): another would be a second effect unless the tool is
        idempotent, whatever `retry_on` says."""
        if not isinstance(error, self.retry_on) or attempt > self.max_retries:
            return False
        if isinstance(error, ToolTimeoutError) and not self.idempotent:
            return False
        backoff = self.retry_backoff_seconds * 2 ** (attempt - 1)
        return deadline is None or time.monotonic() + backoff < deadline

    def _failure(self, error: BaseException, attempts: int) -> ModelVisibleError:
        if isinstance(error, ModelVisibleError) and attempts == 1:
            return error  # already says what the model should read (a timeout, a remote tool's own error)
        if isinstance(error, ToolTimeoutError):
            return error  # its text counts the attempts
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return ToolExecutionError(f"Tool '{self.name}' failed{tries}: {describe_exception(error)}")

    def _inline(self, deadline: float | None) -> bool:
        return deadline is None and self.timeout_seconds is None

    def _run(self, kwargs: dict[str, Any], deadline: float | None, attempt: int) -> Any:
        if self._inline(deadline):
            return _call(self.fn, kwargs, None)
        limit, worker_limit = self.timeout_seconds, False
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            if limit is None or left < limit:
                limit, worker_limit = left, True
        assert limit is not None
        if limit <= 0:
            # Nobody would wait for it: an effect no result reports. Not started at all.
            raise ToolExecutionError(f"Tool '{self.name}' was not run: its worker had no time left.")
        try:
            return run_with_limit(_call, (self.fn, kwargs, limit), limit, f"tool-{self.name}")
        except Overran:
            for value in kwargs.values():
                if isinstance(value, ToolContext):
                    value.state.abandon()  # the attempt may still be running and writing it
            raise ToolTimeoutError(self.name, limit, self.idempotent, attempt, worker_limit) from None


def _call(fn: Callable[..., Any], kwargs: dict[str, Any], limit: float | None) -> Any:
    result = fn(**kwargs)
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result, limit))
    if isinstance(result, Iterator | AsyncIterator):
        # Turned into JSON it would be drained, and one that never ends takes the process's memory.
        raise TypeError(f"a tool returns a value, not a {type(result).__name__}: return a list")
    return result


async def _await(awaitable: Any, limit: float | None) -> Any:
    scope = asyncio.timeout(limit)
    try:
        async with scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise Overran() from None
        raise  # the coroutine's own TimeoutError


def to_model_text(result: Any) -> str:
    """What the model reads: None → "Success", str as is, anything else as JSON."""
    if result is None:
        return "Success"
    if isinstance(result, str):
        return result
    return json.dumps(to_jsonable_python(result), ensure_ascii=False)


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's titles and inline `$ref`s: several OpenAI-compatible servers reject
    references. A recursive type keeps its `$defs`, since it cannot be inlined. Only schema
    keywords are touched: a default or an example that holds `title` or `$ref` keys stays whole."""
    defs = schema.get("$defs", {})
    kept: set[str] = set()

    def inline(node: Any, path: Path, seen: frozenset[str]) -> Any:
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if name in seen:
                kept.add(name)
                return node
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return inline({**defs[name], **rest}, path, seen | {name})
        body = map_subschemas(node, lambda sub, where: inline(sub, where, seen), path)
        body.pop("$defs", None)
        if isinstance(body.get("title"), str):
            del body["title"]
        return body

    out: dict[str, Any] = inline(schema, (), frozenset())
    # Each definition a recursive type still refers to, itself inlined but for its own cycle.
    pending, done = set(kept), set[str]()
    definitions: dict[str, Any] = {}
    while pending - done:
        name = sorted(pending - done)[0]
        done.add(name)
        definitions[name] = inline(defs[name], ("$defs", name), frozenset({name}))
        pending |= kept
    if definitions:
        out["$defs"] = definitions
    return out


def _admits_none(annotation: Any) -> bool:
    if get_origin(annotation) is Annotated:
        return _admits_none(get_args(annotation)[0])
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return type(None) in get_args(annotation)
    return annotation is None or annotation is type(None)


def _is_context(annotation: Any) -> bool:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    candidates = (
        get_args(annotation) if get_origin(annotation) in (typing.Union, types.UnionType) else (annotation,)
    )
    return any(c is ToolContext for c in candidates)


def _explicit(annotation: Any) -> tuple[str | None, bool]:
    """(description, required) given in the annotation's metadata, if any."""
    description, required = None, True
    if get_origin(annotation) is Annotated:
        for meta in get_args(annotation)[1:]:
            if isinstance(meta, Param):
                description = meta.description or description
                required = meta.required
            elif isinstance(meta, FieldInfo) and meta.description:
                description = meta.description
    return description, required


def _docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, parameter descriptions) from a Google, Sphinx/reST, NumPy or Epydoc
    docstring. The description is all the text before the first section, on one line."""
    if not doc:
        return "", {}
    parsed = docstring_parser.parse(doc)
    text = " ".join(filter(None, (parsed.short_description, parsed.long_description)))
    params = {
        # NumPy documents several parameters on one line: `x, y : float`.
        name.strip().lstrip("*"): " ".join((p.description or "").split())
        for p in parsed.params
        for name in p.arg_name.split(",")
    }
    return " ".join(text.split()), params


def _build(fn: Callable[..., Any], options: dict[str, Any]) -> Tool:
    wire_name = options.pop("name", None) or fn.__name__
    if not WIRE_NAME.match(wire_name):
        raise DefinitionError(f"tool name '{wire_name}' must match {WIRE_NAME.pattern}")
    doc_description, doc_params = _docstring(fn.__doc__)
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    context_param = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise DefinitionError(f"tool '{wire_name}': *args and **kwargs cannot be described to a model")
        if param.name not in hints:
            raise DefinitionError(f"tool '{wire_name}': parameter '{param.name}' needs a type hint")
        annotation = hints[param.name]
        if _is_context(annotation):
            context_param = param.name
            continue
        explicit_description, required = _explicit(annotation)
        default = ... if param.default is inspect.Parameter.empty else param.default
        if default is ... and (not required or _admits_none(annotation)):
            default = None  # Optional[T] and Param(required=False): the model may leave it out
        description = explicit_description or doc_params.get(param.name)
        fields[param.name] = (annotation, Field(default, description=description))
    model = create_model(f"{wire_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    text = options.pop("description", None) or doc_description
    if not text:
        raise DefinitionError(f"tool '{wire_name}' needs a description: give it a docstring")
    schema = clean_schema(model.model_json_schema())
    schema.setdefault("properties", {})
    validator = None
    if options.get("strict"):
        try:
            strict = strict_schema(schema)
        except NotStrictError as e:
            raise DefinitionError(f"tool '{wire_name}' cannot be strict: {e}") from e
        # The model's arguments are held to the strict schema first (every key present, no
        # others), then pydantic coerces them as for any tool; formats are left to pydantic.
        validator = json_schema_validator(strict, formats=False, strict_from=schema)
        schema = strict
    return Tool(
        name=wire_name,
        description=text,
        parameters=schema,
        fn=fn,
        args_model=model,
        context_param=context_param,
        validator=validator,
        **options,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    result_converter: Callable[[Any], str] | None = None,
    timeout_seconds: float | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    max_retries: int = 0,
    retry_backoff_seconds: float = 0.5,
    return_direct: bool = False,
    idempotent: bool = False,
    strict: bool = False,
    requires_approval: bool | ApprovalPolicy = False,
    deferred: Deferred | None = None,
    wait_seconds: int | None = None,
    result_schema: dict[str, Any] | type[BaseModel] | None = None,
    runner: str | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None, /, **options: Any
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a `Tool`: `@tool` or `@tool(name=..., timeout_seconds=...)`.

    The text of the docstring before its sections (Google, Sphinx/reST, NumPy or Epydoc
    style, read by `docstring_parser`) is the description the model sees; its parameter
    section describes the parameters, unless the annotation does (`Annotated[T,
    Field(description=...)]` or `Param(...)`). A `ToolContext` parameter is injected and
    never shown to the model. `strict=True` offers the arguments as an OpenAI strict schema.
    `requires_approval=True` (or a function `(arguments, ctx) -> bool`) makes a call wait for a
    person's decision before it runs. `deferred="human"` makes it a question for a person (the
    function is the declaration, its body never runs; the answer is the result), optionally a
    form (`result_schema`); `wait_seconds` bounds the wait. `runner="mail"` runs the tool in
    the runner of that name, its own Lambda function and role (the stack's `runners`), not the
    default one.
    """
    if options.get("max_retries", 0) and not options.get("retry_on"):
        raise DefinitionError("max_retries needs retry_on: the exception types worth retrying")
    if fn is not None:
        return _build(fn, dict(options))
    return lambda f: _build(f, dict(options))


def _check_numbers(t: Tool) -> None:
    """Timeouts and retries, checked where they are written: a NaN, zero or negative timeout would
    report a tool that ran as timed out at once, or never run it."""
    timeout = t.timeout_seconds
    if timeout is not None and not positive_seconds(timeout):
        raise DefinitionError(f"tool '{t.name}': timeout_seconds is a number of seconds above 0, or None")
    if not (isinstance(t.retry_backoff_seconds, int | float) and 0 <= t.retry_backoff_seconds < math.inf):
        raise DefinitionError(f"tool '{t.name}': retry_backoff_seconds is a number of seconds, 0 or more")
    if isinstance(t.max_retries, bool) or not isinstance(t.max_retries, int) or t.max_retries < 0:
        raise DefinitionError(f"tool '{t.name}': max_retries is a whole number, 0 or more")


def positive_seconds(value: object) -> bool:
    """A finite number of seconds above 0 (not a bool, not NaN, not infinite)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf


def _check_deferred(t: Tool) -> None:
    """A deferred tool's declaration, checked where it is written: one line naming the fault."""
    if t.deferred is None:
        if t.wait_seconds is not None or t.result_schema is not None:
            raise DefinitionError(f"tool '{t.name}': wait_seconds and result_schema are for deferred tools")
        return
    if t.deferred not in ("human", "client"):
        raise DefinitionError(f"tool '{t.name}': deferred is 'human' or 'client', not {t.deferred!r}")
    if t.requires_approval is not False or t.child_agent is not None or t.return_direct:
        raise DefinitionError(
            f"tool '{t.name}': a deferred tool is answered from outside; it cannot also require "
            "approval, delegate to an agent or return directly"
        )
    wait = t.wait_seconds
    if wait is not None and (
        isinstance(wait, bool) or not isinstance(wait, int) or not 1 <= wait <= MAX_WAIT_SECONDS
    ):
        raise DefinitionError(
            f"tool '{t.name}': wait_seconds is a whole number of seconds from 1 to {MAX_WAIT_SECONDS:,} (a year)"
        )
    schema = t.result_schema
    if schema is None or (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return
    if not isinstance(schema, dict):
        raise DefinitionError(f"tool '{t.name}': result_schema is a JSON Schema (dict) or a pydantic model")
    import jsonschema  # only deferred tools with a form pay for it at cold start

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        path = "/".join(str(p) for p in e.absolute_path) or "(root)"
        raise DefinitionError(f"tool '{t.name}': invalid result_schema at {path}: {e.message}") from e
    _check_refs(t.name, schema)


def _check_runner(t: Tool) -> None:
    """A runner's name, checked where it is written: it becomes a Lambda function's name."""
    if t.runner is None:
        return
    problem = runner_name_problem(t.runner)
    if problem is not None:
        raise DefinitionError(f"tool '{t.name}': {problem}")
    if t.deferred is not None or t.child_agent is not None:
        raise DefinitionError(
            f"tool '{t.name}': runner is where a tool's code runs; a deferred tool or an agent tool runs none"
        )


def _check_refs(name: str, schema: dict[str, Any]) -> None:
    """Every `$ref` of a result schema points inside it: a dangling one passes `check_schema`
    and would fail every answer; a remote one would need a fetch the answer path never makes."""
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    base = "urn:toolpipe:result-schema"
    resolver = Registry().with_resource(base, DRAFT202012.create_resource(schema)).resolver(base)
    for ref in _refs(schema):
        if not ref.startswith("#"):
            raise DefinitionError(
                f"tool '{name}': result_schema $ref {ref[:80]!r} is not local (use '#/$defs/...')"
            )
        try:
            resolver.lookup(ref)
        except Unresolvable as e:
            raise DefinitionError(f"tool '{name}': result_schema $ref {ref[:80]!r} points nowhere") from e


def _refs(node: Any) -> list[str]:
    """The `$ref` strings of a schema, at any depth; values (enum, const, default) are data."""
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    if not isinstance(node, dict):
        return []
    own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
    data = ("enum", "const", "default", "examples")
    return own + [ref for key, value in node.items() if key not in data for ref in _refs(value)]
