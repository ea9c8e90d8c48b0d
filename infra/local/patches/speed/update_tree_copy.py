"""An update expression's tree is copied node by node, not by `deepcopy`.

moto: an update expression's tree is deep-copied for each request, to be validated on the copy
(the parsed tree is kept per text: `update_parse_cache`); `deepcopy`'s generic walk was half of
an UpdateItem's time.

Why it matters: every tool call's result and every run's counters are updates.

The patch: the tree's nodes are copied as what they are: a class, a child list, a parent.
"""

import copy
from typing import Any

from moto.dynamodb.parsing import validators as update_validators
from moto.dynamodb.parsing.ast_nodes import Node  # type: ignore[attr-defined]  # untyped module

CHECKED_WITH = ("5.2.5",)

_SCALARS = (str, int, float, bool, type(None))
_node_classes: dict[type, bool] = {}


def is_node(value: Any) -> bool:
    """Whether `value` is a node of an expression tree, found once per class: `Node` is
    abstract, and `isinstance` goes through ABCMeta's check, slow at this many calls."""
    kind = type(value)
    known = _node_classes.get(kind)
    if known is None:
        known = _node_classes[kind] = isinstance(value, Node)
    return known


def _copy_update_tree(value: Any, memo: Any = None) -> Any:
    """`deepcopy` as moto's update validator calls it, for the expression trees it copies."""
    if not is_node(value):
        return copy.deepcopy(value, memo)  # the values `list_append` copies
    return _copy_node(value, None)


def _copy_node(node: Any, parent: Any) -> Any:
    copied = object.__new__(type(node))  # nodes are plain objects: their class and fields
    copied.__dict__.update(node.__dict__)
    copied.parent = parent
    if node.children is not None:
        copied.children = [
            _copy_node(child, copied)
            if is_node(child)
            else child
            if isinstance(child, _SCALARS)
            else copy.deepcopy(child)
            for child in node.children
        ]
    return copied


def install() -> None:
    # Rebinds the name the validators look `deepcopy` up by (imported there, not exported).
    update_validators.deepcopy = _copy_update_tree  # type: ignore[attr-defined, assignment]
