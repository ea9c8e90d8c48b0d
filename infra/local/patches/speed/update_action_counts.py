"""An update expression's clause counts are checked once, at its root.

moto: the counts were checked at every node of the clause chain, each check walking the rest of
the chain: quadratic in the clauses (a 12-counter update took ~7 ms).

Why it matters: a run's counters are updated together at every turn.

The patch: the root's clauses include every sub-expression's (too many anywhere is too many
there), so they are checked there once.
"""

from typing import Any

from moto.dynamodb.parsing.ast_nodes import UpdateExpression  # type: ignore[attr-defined]  # untyped module
from moto.dynamodb.parsing.validators import ActionCountValidator

CHECKED_WITH = ("5.2.5",)

_count_at_every_node = ActionCountValidator.traverse


def _count_at_the_root(self: ActionCountValidator, node: Any) -> Any:
    if isinstance(node, UpdateExpression):
        return self.verify_action_counts(node)
    return _count_at_every_node(self, node)


def install() -> None:
    ActionCountValidator.traverse = _count_at_the_root
