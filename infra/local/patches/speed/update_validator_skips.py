"""An update's validators with nothing in its expression to handle do not walk it.

moto: an update expression is validated by walks of its tree, one per validator, each visiting
every node (`Validator.validate`). Several handle nodes that most expressions lack: a function
(`if_not_exists`, `list_append`: the function evaluator), a SET action (the type-mismatch and
empty-string checks of key attributes), a path the item lacks (`NoneExistingPathChecker`: made
only by resolving a path the item does not hold). A walk that finds no node to handle, in a
validator with no hook of its own for the children it passes, returns the tree untouched.

Why it matters: every write of a counter or a stamp is an update; these walks were ~2% of a
local run's instructions (measured with callgrind).

The patch: the tree's node classes are listed once, before the walks, with the one class the
walks put in its place (a typed value); a missing path's class is added when a path is resolved
to one during this validation. A validator that handles none of them, does not override the
child hook and walks with moto's own `traverse`, is skipped; the others walk as before, in
moto's order. Whatever a skipped validator would have raised, it raises on no node: it has none.
"""

import contextvars
from typing import Any

from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]  # untyped module
    DDBTypedValue,
    DepthFirstTraverser,
    NoneExistingPath,
)
from moto.dynamodb.parsing.validators import ExpressionPathResolver, Validator

from toolpipe.infra.local.patches.speed.update_tree_copy import is_node

CHECKED_WITH = ("5.2.5",)

# What the validators' handlers put in place of the nodes they handle: a typed value. A missing
# path is counted apart, as it is made.
MADE_BY_WALKS = frozenset({DDBTypedValue})

_motos_validate = Validator.validate
_motos_resolve = ExpressionPathResolver.resolve_expression_path
_motos_traverse = DepthFirstTraverser.traverse
_motos_child_hook = DepthFirstTraverser.pre_processing_of_child
# Per validation: whether a path was resolved to one the item lacks (a NoneExistingPath).
_missing: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("missing_path", default=None)
# Per validator class: the node classes it handles, or None when it must always walk.
_handled: dict[type, tuple[type, ...] | None] = {}


def _handles(processor: Any) -> tuple[type, ...] | None:
    kind = type(processor)
    if kind not in _handled:
        walks_as_moto = kind.traverse is _motos_traverse and kind.pre_processing_of_child is _motos_child_hook
        _handled[kind] = tuple(processor._processing_map()) if walks_as_moto else None
    return _handled[kind]


def _classes(node: Any) -> set[type]:
    found: set[type] = set()
    pending = [node]
    while pending:
        current = pending.pop()
        if not is_node(current):
            continue
        found.add(type(current))
        if current.children is not None:
            pending.extend(current.children)
    return found


def _resolve_expression_path(self: ExpressionPathResolver, item: Any, path: Any) -> Any:
    resolved = _motos_resolve(self, item, path)
    if isinstance(resolved, NoneExistingPath):
        seen = _missing.get()
        if seen is not None:
            seen[0] = True
    return resolved


def _validate(self: Validator) -> Any:
    node = self.node_to_validate
    present: set[type] | None = None
    missing = [False]
    token = _missing.set(missing)
    try:
        for processor in self.processors:
            handled = _handles(processor)
            if handled is not None:
                if present is None:
                    present = _classes(node) | MADE_BY_WALKS
                kinds = present | {NoneExistingPath} if missing[0] else present
                if not any(issubclass(kind, handled) for kind in kinds):
                    continue
            node = processor.traverse(node)
    finally:
        _missing.reset(token)
    return node


def install() -> None:
    Validator.validate = _validate  # type: ignore[method-assign]
    ExpressionPathResolver.resolve_expression_path = _resolve_expression_path  # type: ignore[method-assign, assignment]
