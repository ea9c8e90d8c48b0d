"""The answer form of a question's page, and the answer it posts, from the call's result schema.

No schema: one free-text `Answer` box. A flat object schema (each property a string, a number,
an integer, a boolean or an enum of such values): one input per property. Anything else (nested
objects, arrays, unions, references, a schema that is not an object): one `Answer (JSON)` box.
The form is a convenience only: what it posts is turned into the schema's types here, and then
checked against the schema by `answers.answer_content` like any other answer.
"""

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from typing import Any

from toolpipe.shared.approvals.models import MAX_ANSWER_CHARS, InvalidAnswerError

# The form's field names: the free-text or JSON box, and one per schema property under a prefix
# of its own (a property may be called `csrf` or `action` too).
ANSWER_FIELD = "answer"
PROPERTY_PREFIX = "field."
_SCALARS = ("string", "number", "integer", "boolean")


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


def render(schema: dict[str, Any] | None, posted: Mapping[str, str]) -> str:
    """The answer inputs (the caller wraps them in the form), holding what `posted` typed."""
    if schema is None:
        return _box("Answer", posted.get(ANSWER_FIELD, ""), 6)
    fields = form_fields(schema)
    if fields is None:
        return _box("Answer (JSON)", posted.get(ANSWER_FIELD, ""), 10)
    return "".join(_input(i, f, posted) for i, f in enumerate(fields))


def _box(label: str, value: str, rows: int) -> str:
    return (
        f'<label for="answer">{escape(label)}</label>'
        f'<textarea id="answer" name="{ANSWER_FIELD}" rows="{rows}" maxlength="{MAX_ANSWER_CHARS}" '
        f"required>{escape(value)}</textarea>"
    )


def _input(index: int, field: FormField, posted: Mapping[str, str]) -> str:
    element_id = f"field-{index}"
    name = escape(field.key)
    value = posted.get(field.key, "")
    required = " required" if field.required else ""
    label = escape(field.label) + (" (required)" if field.required else "")
    hint = f'<small id="{element_id}-hint">{escape(field.hint)}</small>' if field.hint else ""
    described = f' aria-describedby="{element_id}-hint"' if field.hint else ""
    if field.kind == "boolean":
        # A checkbox cannot be left unanswered: unticked is false, so it is never `required`.
        checked = " checked" if value == "true" else ""
        return (
            f'<p><input type="checkbox" id="{element_id}" name="{name}" value="true"{checked}{described}> '
            f'<label for="{element_id}">{label}</label> {hint}</p>'
        )
    if field.kind == "enum":
        # An option's value is its index in the enum: the enum's members need not be strings.
        options = '<option value="">(choose)</option>' + "".join(
            f'<option value="{i}"{" selected" if value == str(i) else ""}>{escape(_shown(choice))}</option>'
            for i, choice in enumerate(field.choices)
        )
        control = f'<select id="{element_id}" name="{name}"{required}{described}>{options}</select>'
    elif field.kind in ("number", "integer"):
        step = "1" if field.kind == "integer" else "any"
        control = (
            f'<input type="number" step="{step}" id="{element_id}" name="{name}" '
            f'value="{escape(value)}"{required}{described}>'
        )
    else:
        control = f'<input type="text" id="{element_id}" name="{name}" value="{escape(value)}"{required}{described}>'
    return f'<p><label for="{element_id}">{label}</label><br>{control} {hint}</p>'


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
        if not text.isdigit() or int(text) >= len(field.choices):
            raise InvalidAnswerError(f"invalid answer: {field.label}: choose one of the listed values")
        return field.choices[int(text)]
    if field.kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise InvalidAnswerError(
                f"invalid answer: {field.label}: {text[:40]!r} is not a whole number"
            ) from None
    try:
        number = float(text)
    except ValueError:
        raise InvalidAnswerError(f"invalid answer: {field.label}: {text[:40]!r} is not a number") from None
    if not math.isfinite(number):
        raise InvalidAnswerError(f"invalid answer: {field.label}: {text[:40]!r} is not a number")
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
