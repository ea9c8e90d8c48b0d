"""An update expression's paths are checked for overlaps once, at its root.

moto: the check for two actions on overlapping paths ran at every node of the clause chain,
each check collecting the actions of the rest of the chain: quadratic in the actions (a
20-counter update spent a tenth of its time there).

Why it matters: a run's counters are added together at each function's end.

The patch: the root's actions include every sub-expression's, so a root without overlaps has
none anywhere, and the check runs there once. A root with an overlap (or any other error) is
checked as moto checks it, node by node, so that the error names the paths moto's names.
"""

from typing import Any

from moto.dynamodb.parsing.ast_nodes import UpdateExpression  # type: ignore[attr-defined]  # untyped module
from moto.dynamodb.parsing.validators import OverlappingPathsValidator

CHECKED_WITH = ("5.2.5",)

_check_at_every_node = OverlappingPathsValidator.traverse


def _check_at_the_root(self: OverlappingPathsValidator, node: Any) -> Any:
    if isinstance(node, UpdateExpression):
        try:
            self.check_for_overlapping_paths(node)
        except Exception:  # moto's own walk raises it, as it names it
            return _check_at_every_node(self, node)
        return node
    return _check_at_every_node(self, node)


def install() -> None:
    OverlappingPathsValidator.traverse = _check_at_the_root
