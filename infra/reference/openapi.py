"""`make openapi` (`python -m infra.openapi`): write the API's OpenAPI document, generated from
the handler's routes, to docs/openapi.json. A test fails when the checked-in file differs."""

import json
import os
import sys
from pathlib import Path

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
# The handler reads its settings at import; the document depends on none of them.
_PLACEHOLDERS = {
    "TABLE_NAME": "openapi",
    "BUCKET_NAME": "openapi",
    "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:000000000000:stateMachine:openapi",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_TRACE_DISABLED": "1",
}


def render() -> str:
    """The document as checked in: sorted keys, two-space indents, a final newline."""
    for name, value in _PLACEHOLDERS.items():
        os.environ.setdefault(name, value)
    from toolpipe.functions.api.handler import openapi_document

    return json.dumps(openapi_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    DOCUMENT.write_text(render())
    sys.stdout.write(
        f"wrote {DOCUMENT.relative_to(Path.cwd()) if DOCUMENT.is_relative_to(Path.cwd()) else DOCUMENT}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
