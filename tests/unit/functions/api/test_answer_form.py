"""The question page's answer form (functions/api/page/answer_form.py): which schemas get a form
field by field, and how the form's strings become the schema's types (issue 9, item 7a)."""

from typing import Any

import pytest

from toolpipe.functions.api.page.answer_form import form_fields, posted_answer, render
from toolpipe.shared.deferred.models import InvalidAnswerError

FLAT = {
    "type": "object",
    "properties": {
        "seats": {"type": "integer"},
        "price": {"type": "number"},
        "window": {"type": "boolean"},
        "name": {"type": "string"},
        "class": {"enum": ["eco", 2, None, True]},
    },
    "required": ["seats"],
}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"stops": {"type": "array", "items": {"type": "string"}}}},
        {
            "type": "object",
            "properties": {"to": {"type": "object", "properties": {"city": {"type": "string"}}}},
        },
        {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}},
        {"type": "object", "properties": {"n": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}},
        {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}, "$defs": {"N": {"type": "integer"}}},
        {"type": "object", "properties": {}},
        {"type": "object"},
        {"type": "string"},
        {"type": "array", "items": {"type": "integer"}},
    ],
)
def test_a_schema_that_is_not_a_flat_object_is_one_json_box(schema: dict[str, Any]) -> None:
    assert form_fields(schema) is None
    html = render(schema, {})
    assert '<label for="answer">Answer (JSON)</label>' in html and "field." not in html


def test_a_flat_object_is_one_field_per_property_in_order() -> None:
    fields = form_fields(FLAT)
    assert fields is not None
    assert [(f.name, f.kind, f.required) for f in fields] == [
        ("seats", "integer", True),
        ("price", "number", False),
        ("window", "boolean", False),
        ("name", "string", False),
        ("class", "enum", False),
    ]
    assert fields[4].choices == ("eco", 2, None, True)


@pytest.mark.parametrize(
    ("form", "answer"),
    [
        ({"field.seats": " 2 "}, {"seats": 2, "window": False}),
        (
            {
                "field.seats": "2",
                "field.price": "9",
                "field.window": "true",
                "field.name": " Ana ",
                "field.class": "1",
            },
            {"seats": 2, "price": 9, "window": True, "name": " Ana ", "class": 2},
        ),
        (
            {"field.seats": "2", "field.price": "9.5", "field.class": "2"},
            {"seats": 2, "price": 9.5, "window": False, "class": None},
        ),
        ({"field.seats": "2", "field.price": "1e3"}, {"seats": 2, "price": 1000.0, "window": False}),
        # Exact: a long integer never goes through a float.
        (
            {"field.seats": "12345678901234567890", "field.price": "-12345678901234567891"},
            {"seats": 12345678901234567890, "price": -12345678901234567891, "window": False},
        ),
        # Blank: left out, so the schema (checked next) says whether it was required.
        ({"field.seats": "", "field.name": ""}, {"window": False}),
        # A field the form does not have is ignored.
        ({"field.seats": "1", "field.admin": "true", "answer": "x"}, {"seats": 1, "window": False}),
    ],
)
def test_the_forms_strings_become_the_schemas_types(form: dict[str, str], answer: dict[str, Any]) -> None:
    got = posted_answer(FLAT, form)
    assert got == answer
    assert all(type(got[k]) is type(v) for k, v in answer.items())


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"field.seats": "2.5"}, "invalid answer: seats: '2.5' is not a whole number"),
        ({"field.seats": "9" * 5000}, "is not a whole number"),
        ({"field.seats": "1", "field.price": "inf"}, "invalid answer: price: 'inf' is not a number"),
        ({"field.seats": "1", "field.price": "ten"}, "invalid answer: price: 'ten' is not a number"),
        ({"field.seats": "1", "field.class": "4"}, "invalid answer: class: choose one of the listed values"),
        ({"field.seats": "1", "field.class": "-1"}, "invalid answer: class: choose one of the listed values"),
        # Unicode digits and Python's own number syntax are not JSON numbers.
        (
            {"field.seats": "1", "field.class": "\u00b2"},
            "invalid answer: class: choose one of the listed values",
        ),
        (
            {"field.seats": "1", "field.class": "9" * 5000},
            "invalid answer: class: choose one of the listed values",
        ),
        ({"field.seats": "1_000"}, "invalid answer: seats: '1_000' is not a whole number"),
        ({"field.seats": "\u0663"}, "is not a whole number"),
        ({"field.seats": "+1"}, "is not a whole number"),
        ({"field.seats": "1", "field.price": "1_000.5"}, "invalid answer: price: '1_000.5' is not a number"),
        ({"field.seats": "1", "field.price": "\u0661.5"}, "is not a number"),
        ({"field.seats": "1", "field.price": "1e309"}, "invalid answer: price: '1e309' is not a number"),
        ({"field.seats": "1", "field.price": "nan"}, "is not a number"),
        ({"field.seats": "1", "field.price": ".5"}, "is not a number"),
    ],
)
def test_a_field_that_cannot_be_its_type_is_one_line_naming_it(form: dict[str, str], error: str) -> None:
    with pytest.raises(InvalidAnswerError) as raised:
        posted_answer(FLAT, form)
    assert error in str(raised.value) and "\n" not in str(raised.value)


def test_free_text_is_the_text_and_a_json_box_is_its_json() -> None:
    assert posted_answer(None, {"answer": "Lyon,\n in May"}) == "Lyon,\n in May"
    nested = {"type": "object", "properties": {"stops": {"type": "array"}}}
    assert posted_answer(nested, {"answer": '{"stops": [1]}'}) == {"stops": [1]}
    with pytest.raises(InvalidAnswerError, match=r"^invalid answer: not JSON"):
        posted_answer(nested, {"answer": "{"})


def test_what_the_form_shows_is_escaped() -> None:
    schema = {"type": "object", "properties": {"<b>": {"type": "string", "title": '"<i>', "enum": ["<x>"]}}}
    html = render(schema, {"field.<b>": '"><script>'})
    assert "<b>" not in html and "<i>" not in html and "<x>" not in html and "<script>" not in html
