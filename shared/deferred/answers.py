"""A deferred call's answer: checked against what the call asked for, turned into the text the
model reads. One line says what is wrong with a bad one; nothing is recorded for it. And what the
model reads for a call that got none (denied, or no answer in time)."""

import json
from typing import Any

from toolpipe.shared.deferred.hashing import canonical_json
from toolpipe.shared.deferred.models import (
    MAX_ANSWER_CHARS,
    QUESTION_CHARS,
    Approval,
    ApprovalKind,
    ApprovalStatus,
    InvalidAnswerError,
)
from toolpipe.shared.errors import ErrorKind, error_text


def answer_content(kind: ApprovalKind, schema: dict[str, Any] | None, value: Any, field: str) -> str:
    """The tool result for `value`: the text itself for a string, else its JSON. A person's
    answer without a schema is free text (a non-blank string); with one, and for a program's
    result, any JSON that matches the schema. At most `MAX_ANSWER_CHARS` either way."""
    if kind is ApprovalKind.HUMAN and schema is None and (not isinstance(value, str) or not value.strip()):
        raise InvalidAnswerError(f"invalid {field}: a free-text answer is a non-blank string")
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidAnswerError(f"invalid {field}: not plain JSON") from e
    if len(text) > MAX_ANSWER_CHARS:
        raise InvalidAnswerError(f"invalid {field}: longer than {MAX_ANSWER_CHARS:,} characters")
    if schema is not None:
        import jsonschema  # only calls with a result schema pay for it
        from referencing.exceptions import Unresolvable

        try:
            error = jsonschema.exceptions.best_match(
                jsonschema.Draft202012Validator(schema).iter_errors(value)
            )
        except Unresolvable as e:
            # Refused at declaration; a schema stored before that check still answers one line.
            raise InvalidAnswerError(
                f"invalid {field}: the tool's result_schema cannot be checked ({e})"
            ) from e
        if error is not None:
            where = ".".join([field, *(str(p) for p in error.absolute_path)])
            message = error.message if len(error.message) <= 300 else error.message[:299] + "…"
            raise InvalidAnswerError(f"invalid {field}: {where}: {message}")
    return text


def question_of(arguments: str, limit: int | None = QUESTION_CHARS) -> str:
    """What a human-input call asks: its `question` argument when it has one (the usual
    `ask_user(question)`), else its arguments' JSON; cut at `limit` (None: whole, as the
    question page shows it)."""
    try:
        parsed = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        parsed = arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("question"), str):
        text = str(parsed["question"])
    else:
        try:
            text = canonical_json(parsed)
        except (TypeError, ValueError):
            text = str(arguments)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def unapproved_result(approval: Approval) -> tuple[str, ErrorKind] | None:
    """What the model reads for a call a person denied, or nobody decided (or answered) in time."""
    if approval.kind is not ApprovalKind.APPROVAL and approval.status is ApprovalStatus.EXPIRED:
        who = "a person" if approval.kind is ApprovalKind.HUMAN else "the caller's program"
        waited = f"the call to '{approval.tool}' waited for {who} until {approval.expires_at}"
        return error_text(f"no answer came in time: {waited}; it has no result."), ErrorKind.NO_ANSWER
    if approval.status is ApprovalStatus.DENIED:
        reason = approval.reason or "(none given)"
        text = f"A person denied the call to '{approval.tool}'; it was not run. Their reason: {reason}"
        return error_text(text), ErrorKind.APPROVAL_DENIED
    if approval.status is ApprovalStatus.EXPIRED:
        text = (
            f"the call to '{approval.tool}' needed a person's approval and none came in time; it was not run."
        )
        return error_text(text), ErrorKind.APPROVAL_EXPIRED
    return None
