"""A condition expression is parsed once per text and the values it names.

moto: each condition (and filter) expression is tokenised with regular expressions and parsed
on every request, twice for a conditional write (to check the names it uses, then to evaluate
it): a sixth of an UpdateItem's time.

Why it matters: nearly every write of a run is conditional (`attribute_exists(pk)` and the like).

The patch: the parsed syntax tree is kept per expression text and the names and values that
appear in the text (any whose placeholder is a substring of it: a superset of those it uses),
for the last 1,024 of them. The conditions (moto's `Op` objects) are built from the kept tree
for each request, as moto builds them, and the names and values found are reported as moto
reports them. An expression that fails to parse is parsed, and refused, every time.
"""

import json
import threading
from collections import OrderedDict
from typing import Any

from moto.dynamodb.comparisons import ConditionExpressionParser, OpDefault

CHECKED_WITH = ("5.2.5",)

KEPT = 1024

_motos_own = ConditionExpressionParser.parse
_lock = threading.Lock()  # requests may be served on several threads outside the runtime
_kept: "OrderedDict[tuple[str, str], tuple[Any, list[str], list[str]]]" = OrderedDict()


def _key(parser: ConditionExpressionParser) -> tuple[str, str] | None:
    text = parser.condition_expression or ""
    named = {
        placeholder: value
        for placeholders in (parser.expression_attribute_names, parser.expression_attribute_values)
        for placeholder, value in (placeholders or {}).items()
        if placeholder in text
    }
    try:
        return text, json.dumps(named, sort_keys=True)
    except (TypeError, ValueError):  # a value JSON cannot hold: not kept
        return None


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
    node, names, values = kept
    self.expr_attr_names_found.extend(names)
    self.expr_attr_values_found.extend(values)
    return self._make_op_condition(node)


def install() -> None:
    ConditionExpressionParser.parse = parse  # type: ignore[method-assign]
