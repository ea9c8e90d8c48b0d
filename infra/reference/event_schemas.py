"""Writes the JSON Schema of each run event's detail, and of RunRequested's, to docs/events/
(`make event-schemas`).

The schemas come from the pydantic models in `shared/runs/events.py`; a test fails when a
checked-in file differs from what this writes.
"""

import sys
from pathlib import Path

from toolpipe.shared.runs.events import schema_text, schemas
from toolpipe.shared.triggers.events import run_requested_schema

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "docs" / "events"


def write(folder: Path = FOLDER) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in schemas().items():
        path = folder / f"{name}.json"
        path.write_text(schema_text(schema))
        written.append(path)
    # The one event toolpipe consumes rather than publishes (README "Triggers").
    path = folder / "RunRequested.json"
    path.write_text(run_requested_schema())
    written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
