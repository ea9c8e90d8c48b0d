"""An update expression is parsed once per text.

moto: each update expression is tokenised and parsed twice a request (to check it, then to
run it).

Why it matters: every tool call's result and every run's counters are updates.

The patch: parsed trees are kept per text. The tree is only read; validation works on its own
copy (`update_tree_copy`).
"""

import functools

from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]  # untyped module

CHECKED_WITH = ("5.2.5",)


def install() -> None:
    UpdateExpressionParser.make = classmethod(
        functools.lru_cache(maxsize=512)(UpdateExpressionParser.make.__func__)  # type: ignore[arg-type]
    )
