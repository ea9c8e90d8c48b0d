"""IAM condition blocks, evaluated as IAM evaluates them, for the local runtime's checks (`iam.py`).

moto's own evaluation cannot stand in (moto 5.2.5, `IAMPolicyStatement._check_conditions`): it
knows `StringEquals` alone and lets every other operator pass, passes a condition whose key the
request does not carry, and turns an `Allow` whose condition fails into an explicit deny of the
action. Here, as IAM's reference states
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html):

- every operator and every key of a block must hold; one of a key's policy values is enough;
- a key the request does not carry fails a plain operator, holds for a negated one (`StringNot*`,
  `ArnNot*`) and for `...IfExists`; `ForAllValues:` holds over no values, `ForAnyValue:` does not;
  `Null` tests for the key itself;
- an operator not handled here raises `UnsupportedConditionError`, and the caller fails closed.

Condition keys are case-insensitive; `String*` values are not, but for `...IgnoreCase`.
"""

import re
from collections.abc import Callable, Mapping
from typing import Any

# A request's condition keys (lower case) and their values: one for a single-valued key.
Context = Mapping[str, tuple[str, ...]]


class UnsupportedConditionError(ValueError):
    """A condition operator this evaluation does not know: what it would decide is unknown."""


def _wildcard(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL | (re.IGNORECASE if ignore_case else 0)) is not None


def _arn_like(pattern: str, value: str) -> bool:
    # An ARN's six parts are matched one by one: a wildcard never spans a part's colon.
    patterns, values = pattern.split(":", 5), value.split(":", 5)
    return len(patterns) == len(values) == 6 and all(map(_wildcard, patterns, values))


# Each positive operator, and the negated one that holds where it does not.
_MATCHERS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda policy, value: policy == value,
    "StringEqualsIgnoreCase": lambda policy, value: policy.casefold() == value.casefold(),
    "StringLike": _wildcard,
    "ArnEquals": lambda policy, value: policy == value,
    "ArnLike": _arn_like,
}
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}


def _text(value: Any) -> str:
    # JSON's true/false are IAM's "true"/"false", not Python's True/False.
    return str(value).lower() if isinstance(value, bool) else str(value)


def _values(value: Any) -> list[str]:
    return [_text(v) for v in value] if isinstance(value, list) else [_text(value)]


def _one(operator: str, policy_values: list[str], values: tuple[str, ...] | None) -> bool:
    """One key of one operator: `values` is what the request carries (None: not the key)."""
    if operator == "Null":
        return all((v == "true") == (values is None) for v in policy_values)
    qualifier, _, name = operator.rpartition(":")
    if_exists = name.endswith("IfExists")
    name = name.removesuffix("IfExists")
    positive = _NEGATED.get(name, name)
    match = _MATCHERS.get(positive)
    if match is None or qualifier not in ("", "ForAllValues", "ForAnyValue"):
        raise UnsupportedConditionError(operator)
    negated = positive != name

    def holds(value: str) -> bool:
        found = any(match(p, value) for p in policy_values)
        return not found if negated else found

    if qualifier == "ForAllValues":
        return all(holds(v) for v in values or ())
    if qualifier == "ForAnyValue":
        return any(holds(v) for v in values or ())
    if values is None:
        return if_exists or negated
    return all(holds(v) for v in values) if negated else any(holds(v) for v in values)


def hold(condition: Mapping[str, Any], context: Context) -> bool:
    """Whether a statement's `Condition` block holds for a request with `context`."""
    keys = {key.lower(): values for key, values in context.items()}
    return all(
        _one(operator, _values(expected), keys.get(key.lower()))
        for operator, block in condition.items()
        for key, expected in block.items()
    )
