"""The page's HTML, from the Jinja2 templates beside this module, autoescaped.

Server-rendered HTML with no script: the Content-Security-Policy allows the page's one
stylesheet (by its hash) and nothing else.
"""

import base64
import hashlib
from html import escape
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup


def _as_html_escape(value: Any) -> Any:
    # Every value as `html.escape` writes it (`&quot;`, `&#x27;`), as the page always has:
    # markupsafe's `&#34;` is the same HTML, but people and tests compare the page's text. A part
    # already rendered (Markup) goes in as is; autoescape stays on behind this.
    return value if isinstance(value, Markup) else Markup(escape(str(value)))


ENVIRONMENT = Environment(
    loader=PackageLoader("toolpipe.functions.api.page", "templates"),
    autoescape=select_autoescape(["html"]),
    finalize=_as_html_escape,
    undefined=StrictUndefined,  # a name a template uses and no view gives is a bug, not a blank
    trim_blocks=True,
    lstrip_blocks=True,
)

_STYLE = ENVIRONMENT.get_template("page.css").render()
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
# No script at all; forms post only back here; no framing (clickjacking); nothing else loads.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


def page_headers(content_security_policy: str) -> dict[str, str]:
    """What every page of the API is served with, around its own Content-Security-Policy."""
    return {
        "Cache-Control": "no-store",
        # An approval page's URL carries its signature: never send it on to another site. Not `no-referrer`:
        # under it Chromium sends the page's own form POST with `Origin: null`, which is refused.
        "Referrer-Policy": "same-origin",
        "Content-Security-Policy": content_security_policy,
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
    }


HEADERS = page_headers(CONTENT_SECURITY_POLICY)


def render(template: str, **values: Any) -> str:
    """`template` (a file in templates/) filled with `values`."""
    return ENVIRONMENT.get_template(template).render(**values)
