"""An action's name is turned into snake case once.

moto: per request, the action's name is turned into snake case with regular expressions.

Why it matters: it is paid by every request moto serves, for the same few names.

The patch: names are converted once each.
"""

import functools

from moto.core import responses

CHECKED_WITH = ("5.2.5",)


def install() -> None:
    snake_case = responses.camelcase_to_underscores  # type: ignore[attr-defined]  # imported there, not exported
    responses.camelcase_to_underscores = functools.lru_cache(maxsize=4096)(snake_case)  # type: ignore[attr-defined]
