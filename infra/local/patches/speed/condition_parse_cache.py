"""A condition expression is parsed once per text and the values it names.

moto: each condition (and filter) expression is tokenised with regular expressions and parsed
on every request, twice for a conditional write (to check the names it uses, then to evaluate
it): a sixth of an UpdateItem's time.

Why it matters: nearly every write of a run is conditional (`attribute_exists(pk)` and the like).

The patch: the parsed syntax tree is kept per expression text and the names and values that
appear in the text (any whose placeholder is a substring of it: a superset of those it uses),
for the last 1,024 of them, each key at most 4 KiB (large values are parsed each time, not held).
The conditions (moto's `Op` objects) are built for each request as moto builds them, from the
kept tree with the request's own value objects in it: moto may keep a value's list in an item
(a set written by `SET s = :v`) and change it later, so the kept tree's values are never
used again. The names and values found are reported as moto reports them. An expression that
fails to parse is parsed, and refused, every time.
"""

import json
import threading
from collections import OrderedDict
from typing import Any

from moto.dynamodb.comparisons import ConditionExpressionParser, OpDefault

CHECKED_WITH = ("5.2.5",)

KEPT = 1024
# A key (the text and the values it names) longer than this is not kept: an item's worth of
# values, 1,024 times over, would be held for the process's life.
MAX_KEY = 4096

_motos_own = ConditionExpressionParser.parse
_lock = threading.Lock()  # requests may be served on several threads outside the runtime
_kept: "OrderedDict[tuple[str, str], tuple[Any, list[str], list[str]]]" = OrderedDict()


def _key(parser: ConditionExpressionParser) -> tuple[str, str] | None:
    text = parser.condition_expression or ""
    # Names and values apart: a transaction's values may hold a "#name" key too.
    named = [
        {placeholder: value for placeholder, value in (placeholders or {}).items() if placeholder in text}
        for placeholders in (parser.expression_attribute_names, parser.expression_attribute_values)
    ]
    try:
        found = json.dumps(named, sort_keys=True)
    except (TypeError, ValueError):  # a value JSON cannot hold: not kept
        return None
    return (text, found) if len(text) + len(found) <= MAX_KEY else None


def _tree(parser: ConditionExpressionParser) -> Any:
    """moto's `parse`, up to the tree it makes its conditions from."""
    nodes = parser._lex_condition_expression()
    nodes = parser._parse_paths(nodes)
    nodes = parser._apply_functions(nodes)
    nodes = parser._apply_comparator(nodes)
    nodes = parser._apply_in(nodes)
    nodes = parser._apply_between(nodes)
    nodes = parser._apply_parens_and_booleans(nodes)
    node = nodes[0]
    parser._assert_no_redundant_parentheses(node)
    return node


def parse(self: ConditionExpressionParser) -> Any:
    if not self.condition_expression:
        return OpDefault(None, None)  # type: ignore[arg-type]  # as moto's own
    key = _key(self)
    kept = None
    if key is not None:
        with _lock:
            kept = _kept.get(key)
            if kept is not None:
                _kept.move_to_end(key)
    if kept is None:
        node = _tree(self)
        kept = (node, self._find_literals(node), self._find_expr_attr_values(node))
        if key is not None:
            with _lock:
                _kept[key] = kept
                if len(_kept) > KEPT:
                    _kept.popitem(last=False)
    else:
        node = _with_values(kept[0], self)
    self.expr_attr_names_found.extend(kept[1])
    self.expr_attr_values_found.extend(kept[2])
    return self._make_op_condition(node)


def _with_values(node: Any, parser: ConditionExpressionParser) -> Any:
    """The kept tree with the request's own value objects in it, as its own parse would hold."""
    if node.kind == ConditionExpressionParser.Kind.EXPRESSION_ATTRIBUTE_VALUE:
        return node._replace(value=parser._lookup_expression_attribute_value(node.text))
    if node.children:
        return node._replace(children=[_with_values(child, parser) for child in node.children])
    return node


def install() -> None:
    ConditionExpressionParser.parse = parse  # type: ignore[method-assign]
