"""A response class's method list is listed once.

moto: every request rebuilt its response class's method list with `inspect.getmembers`.

Why it matters: it is paid by every request moto serves.

The patch: response classes do not change once imported, so the list is kept per class.
"""

import functools

from moto.core import responses

CHECKED_WITH = ("5.2.5",)


def install() -> None:
    listed = responses.method_names_from_class  # type: ignore[attr-defined]  # imported there, not exported
    responses.method_names_from_class = functools.cache(listed)  # type: ignore[attr-defined]
