"""Arguments checked against a JSON Schema (explicit-schema tools, and every strict tool).

The validator does not know the tool's wire name, which the registry may change (see
`names.py`): it raises `ArgumentsMismatch`, and the tool words the model's error with its name.
"""

from collections.abc import Callable
from typing import Any

from toolpipe.shared.tools.strict import drop_strict_nulls

Validator = Callable[[dict[str, Any]], dict[str, Any]]


class ArgumentsMismatch(Exception):
    """The arguments do not satisfy the schema (or the schema cannot be applied to them)."""

    def __init__(self, details: str, *, unusable_schema: bool = False) -> None:
        super().__init__(details)
        self.details = details
        self.unusable_schema = unusable_schema

    def for_model(self, tool: str) -> str:
        if self.unusable_schema:
            return f"The schema of '{tool}' could not be applied to the arguments: {self.details}."
        return f"Invalid arguments for '{tool}': {self.details}."


def json_schema_validator(
    schema: dict[str, Any], *, formats: bool = True, strict_from: dict[str, Any] | None = None
) -> Validator:
    """Checks arguments against `schema` (already checked as a schema) and returns them; with
    `strict_from` (the schema before it was made strict), in that schema's shape again.

    jsonschema (~50 ms to import) is loaded at the first call, not when the tool is defined: a
    cold start that defines strict tools but runs none does not pay for it."""
    built: list[Any] = []

    def validator() -> Any:
        if not built:
            import jsonschema

            kind = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            built.append(kind(schema, format_checker=jsonschema.FormatChecker() if formats else None))
        return built[0]

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            errors = sorted(validator().iter_errors(arguments), key=lambda e: list(e.absolute_path))
        except Exception as e:
            # A schema valid in form that cannot be applied (a `$ref` to nowhere): the call fails,
            # as the tool's own error the model reads, and the run goes on.
            raise ArgumentsMismatch(str(e), unusable_schema=True) from e
        if errors:
            raise ArgumentsMismatch(
                "; ".join(
                    f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}"
                    for e in errors
                )
            )
        if strict_from is not None:
            dropped: dict[str, Any] = drop_strict_nulls(arguments, strict_from)
            return dropped
        return arguments

    return validate
