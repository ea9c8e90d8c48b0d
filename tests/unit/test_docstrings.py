from toolpipe.shared.tools.docstrings import parse_docstring


def test_google_docstring_description_and_args() -> None:
    parsed = parse_docstring(
        """Book a table.

        Finds a free slot first.

        Args:
            name (str): Who books.
            size: How many people,
                children included.

        Returns:
            The booking id.
        """
    )
    assert parsed.description == "Book a table. Finds a free slot first."
    assert parsed.params == {"name": "Who books.", "size": "How many people, children included."}


def test_no_docstring() -> None:
    assert parse_docstring(None).description == ""
