"""The answer form of a question's page, and the answer it posts, from the call's result schema.

No schema: one free-text `Answer` box. A flat object schema (each property a string, a number,
an integer, a boolean or an enum of such values): one input per property. Anything else (nested
objects, arrays, unions, references, a schema that is not an object): one `Answer (JSON)` box.
The form is a convenience only: what it posts is turned into the schema's types here, and then
checked against the schema by `answers.answer_content` like any other answer.
"""

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from toolpipe.functions.api.page import views
from toolpipe.shared.deferred.models import MAX_ANSWER_CHARS, InvalidAnswerError

# The form's field names: the free-text or JSON box, and one per schema property under a prefix
# of its own (a property may be called `csrf` or `action` too).
ANSWER_FIELD = "answer"
PROPERTY_PREFIX = "field."
_SCALARS = ("string", "number", "integer", "boolean")
# JSON's number grammar on ASCII digits: [0-9], never \d, which takes every Unicode digit.
_INDEX = re.compile(r"0|[1-9][0-9]{0,5}")
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class FormField:
    """One property of a flat object schema, as the form asks for it."""

    name: str
    kind: str  # one of _SCALARS, or "enum"
    label: str
    hint: str
    required: bool
    choices: tuple[Any, ...] = ()

    @property
    def key(self) -> str:
        return PROPERTY_PREFIX + self.name


def form_fields(schema: dict[str, Any]) -> list[FormField] | None:
    """The fields of a flat object schema, in its order; None for any other schema."""
    properties = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(properties, dict) or not properties:
        return None
    required = schema.get("required") or []
    fields: list[FormField] = []
    for name, spec in properties.items():
        kind = _kind(spec)
        if kind is None:
            return None
        title = spec.get("title")
        description = spec.get("description")
        fields.append(
            FormField(
                name=name,
                kind=kind,
                label=title if isinstance(title, str) and title else name,
                hint=description if isinstance(description, str) else "",
                required=name in required,
                choices=tuple(spec["enum"]) if kind == "enum" else (),
            )
        )
    return fields


def _kind(spec: Any) -> str | None:
    """How one property is asked for, or None when it needs more than one input."""
    if not isinstance(spec, dict):
        return None
    enum = spec.get("enum")
    if isinstance(enum, list) and enum and all(_scalar(v) for v in enum):
        return "enum"
    kind = spec.get("type")
    return kind if isinstance(kind, str) and kind in _SCALARS else None


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


# --- the form ----------------------------------------------------------------------------


def render(schema: dict[str, Any] | None, posted: Mapping[str, str]) -> Markup:
    """The answer inputs (the caller wraps them in the form), holding what `posted` typed."""
    fields = None if schema is None else form_fields(schema)
    if fields is None:
        label, rows = ("Answer", 6) if schema is None else ("Answer (JSON)", 10)
        values: dict[str, Any] = {
            "label": label,
            "rows": rows,
            "name": ANSWER_FIELD,
            "value": posted.get(ANSWER_FIELD, ""),
        }
        return Markup(views.render("answer_inputs.html", fields=None, max_chars=MAX_ANSWER_CHARS, **values))
    shown = [
        dataclasses.asdict(f)
        | {"key": f.key, "value": posted.get(f.key, ""), "choices": [_shown(c) for c in f.choices]}
        for f in fields
    ]
    return Markup(views.render("answer_inputs.html", fields=shown))


def _shown(choice: Any) -> str:
    return choice if isinstance(choice, str) else json.dumps(choice)


# --- the answer it posts -------------------------------------------------------------------


def posted_answer(schema: dict[str, Any] | None, posted: Mapping[str, str]) -> Any:
    """The answer the form's fields make: the text (no schema), the parsed JSON (a schema the
    form cannot ask for field by field), or an object of the properties, each turned into its
    type; a blank optional field is left out. `InvalidAnswerError` names a field that cannot be."""
    if schema is None:
        return posted.get(ANSWER_FIELD, "")
    fields = form_fields(schema)
    if fields is None:
        text = posted.get(ANSWER_FIELD, "")
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as e:
            raise InvalidAnswerError(f"invalid answer: not JSON ({' '.join(str(e).split())[:200]})") from e
    answer: dict[str, Any] = {}
    for field in fields:
        if field.kind == "boolean":
            answer[field.name] = posted.get(field.key) == "true"
            continue
        text = posted.get(field.key, "")
        if field.kind != "string":
            text = text.strip()
        if not text:
            continue  # blank: left out, so the schema says whether it was required
        answer[field.name] = _typed(field, text)
    return answer


def _typed(field: FormField, text: str) -> Any:
    if field.kind == "string":
        return text
    if field.kind == "enum":
        if not _INDEX.fullmatch(text) or int(text) >= len(field.choices):
            raise InvalidAnswerError(f"invalid answer: {field.label}: choose one of the listed values")
        return field.choices[int(text)]
    grammar, what = (_INTEGER, "a whole number") if field.kind == "integer" else (_NUMBER, "a number")
    try:
        # JSON's own grammar on ASCII digits, then JSON's parser: integers stay exact (no trip
        # through float), and `1_000`, `٣` or `inf`, which Python's int()/float() take, are refused.
        number = json.loads(text) if grammar.fullmatch(text) else None
    except ValueError:  # an integer past Python's digit limit
        number = None
    if number is None or (isinstance(number, float) and not math.isfinite(number)):
        raise InvalidAnswerError(f"invalid answer: {field.label}: {text[:40]!r} is not {what}")
    return number
