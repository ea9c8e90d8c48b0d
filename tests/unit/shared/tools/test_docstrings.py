"""Docstrings are prompt text, read by `docstring_parser`: the description and each parameter's."""

from typing import Any

import pytest

from toolpipe.shared.tools import tool


def _described(doc: str | None) -> tuple[str, dict[str, Any]]:
    def book(name: str, size: int) -> str:
        return name

    book.__doc__ = doc
    spec = tool(description="Fallback." if doc is None else None)(book).spec()["function"]
    props = spec["parameters"]["properties"]
    return spec["description"], {k: v.get("description") for k, v in props.items()}


def test_google_docstring_description_and_args() -> None:
    assert _described(
        """Book a table.

        Finds a free slot first.

        Args:
            name (str): Who books.
            size: How many people,
                children included.

        Returns:
            The booking id.
        """
    ) == (
        "Book a table. Finds a free slot first.",
        {"name": "Who books.", "size": "How many people, children included."},
    )


@pytest.mark.parametrize(
    "doc",
    [
        # Epydoc, which our own parser did not know.
        """Book a table.

        @param name: Who books.
        @type name: str
        @param size: How many people.
        """,
        # Google's `Params:` heading, which our own parser did not know either.
        """Book a table.

        Params:
            name: Who books.
            size: How many people.
        """,
        # NumPy's parameters that share a line, which our own parser skipped.
        """Book a table.

        Parameters
        ----------
        name : str
            Who books.
        size, _unused : int
            How many people.
        """,
    ],
    ids=["epydoc", "google-params", "numpy-shared-line"],
)
def test_more_styles_are_understood(doc: str) -> None:
    assert _described(doc) == ("Book a table.", {"name": "Who books.", "size": "How many people."})


def test_no_docstring_needs_a_description() -> None:
    assert _described(None) == ("Fallback.", {"name": None, "size": None})
