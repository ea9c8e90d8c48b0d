"""Update validation finds each node's handler by its class, once.

moto: validation walks the expression tree once per validator (nine), and at each node rebuilt
the validator's map of node types to handlers, twice, then matched the node against it with
`isinstance` on abstract classes: a fifth of an UpdateItem.

Why it matters: every tool call's result and every run's counters are updates.

The patch: the map is built once per validator (it holds the validator's own bound methods, so
it cannot change under it), and which of its types a node's class matches is kept per validator
class and node class. It calls no `nodes_to_be_processed`/`process` of the validator's: no
validator overrides them (a test checks, for the moto this runs with).
"""

from typing import Any

from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser  # type: ignore[attr-defined]  # untyped module

from toolpipe.infra.local.patches.speed.update_tree_copy import is_node

CHECKED_WITH = ("5.2.5",)

_handled_as: dict[tuple[type, type], type | None] = {}
_moto_traverse_node = DepthFirstTraverser.traverse_node_recursively


def _traverse_node_recursively(self: DepthFirstTraverser, node: Any, child_id: int = -1) -> Any:
    """moto's depth-first walk, each node's handler found by its class once per validator class."""
    if not is_node(node):
        return node
    parent = node.parent
    if node.children is not None:
        for i, child in enumerate(node.children):
            self.pre_processing_of_child(node, i)
            self.traverse_node_recursively(child, i)
    handlers: dict[type, Any] | None = self.__dict__.get("_toolpipe_handlers")
    if handlers is None:  # the validator's own bound methods: built once per validator
        handlers = self.__dict__["_toolpipe_handlers"] = self._processing_map()
    key = (type(self), type(node))
    if key not in _handled_as:
        _handled_as[key] = next((t for t in handlers if isinstance(node, t)), None)
    handled_as = _handled_as[key]
    if handled_as is None:
        return node
    node = handlers[handled_as](node)
    node.parent = parent
    if parent:
        parent.children[child_id] = node
    return node


def install() -> None:
    DepthFirstTraverser.traverse_node_recursively = _traverse_node_recursively
