"""The timeline page of a run and the runs list, as HTML from the templates beside the approval
page's (autoescaped), with one stylesheet and one small script, no build step and nothing loaded
from elsewhere.

The run's timeline goes into the page as JSON in a `<script type="application/json">` (Jinja's
`tojson` escapes `<`, `>`, `&` and `'`, so no text in it can close the element), and the script
draws it with `textContent` only. The Content-Security-Policy allows that one script and that one
stylesheet (by their hashes), requests to this API only (`connect-src 'self'`: the live refresh),
and nothing else: no other script, image, frame or form.
"""

import base64
import hashlib
from importlib.resources import files
from typing import Any

from markupsafe import Markup

from toolpipe.functions.api.page.views import ENVIRONMENT, page_headers
from toolpipe.shared.messages import RunStatus
from toolpipe.shared.runs.timeline import Timeline
from toolpipe.shared.runs.timeline_reader import RunRows

_TEMPLATES = files("toolpipe.functions.api.page") / "templates"
# Ours, not a caller's: inserted as they are (escaping would break `<` in the script).
_STYLE = Markup((_TEMPLATES / "timeline.css").read_text(encoding="utf-8"))
_SCRIPT = Markup((_TEMPLATES / "timeline.js").read_text(encoding="utf-8"))


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src '{_hash(_STYLE)}'; script-src '{_hash(_SCRIPT)}'; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = page_headers(CONTENT_SECURITY_POLICY)


def timeline_page(timeline: Timeline) -> str:
    """The run's page: its timeline drawn by the script, live while the run goes on."""
    run_id = timeline.run.run_id
    return ENVIRONMENT.get_template("timeline.html").render(
        title=f"Run {run_id}",
        run_id=run_id,
        # The API's run resource, relative to the page (`<stage>/ui/runs/<id>`).
        api=f"../../runs/{run_id}",
        data=timeline.model_dump(mode="json"),
        style=_STYLE,
        script=_SCRIPT,
    )


def runs_page(rows: RunRows) -> str:
    """The runs list: status, agent, start, duration and cost of each, newest first."""
    runs: list[dict[str, Any]] = [
        {
            **row.model_dump(),
            "duration": "running"
            if row.status is RunStatus.RUNNING
            else "-"
            if row.duration_ms is None
            else f"{row.duration_ms / 1000:.1f} s",
            "cost": "-" if row.cost_usd is None else f"${row.cost_usd:.6f}",
            "infra": "-" if row.infra_usd is None else f"${row.infra_usd:.6f}",
        }
        for row in rows.runs
    ]
    return ENVIRONMENT.get_template("runs.html").render(title="Runs", runs=runs, next=rows.next, style=_STYLE)
