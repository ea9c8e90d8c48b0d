"""moto's REST routes compile their URL builders only if one is ever used, which moto never does.

moto: a REST service (S3, Lambda, SES, API Gateway...) is routed by a werkzeug `Map` of its
operations' paths, one `SmithyRule` each, built the first time the process serves that service.
werkzeug's `Rule.compile` makes each rule's regular expression, which matching uses, and also
generates and compiles the Python source of two URL builders (`_build`, `_build_unknown`), which
only `MapAdapter.build` uses: moto matches requests and builds no URL.

Why it matters: a local runtime's first start in a process routed Lambda's 89 operations that
way, ~12% of that start's CPU (py-spy, 6 starts), for code that never ran; every process that
starts a runtime pays it (`toolpipe serve`, a project's first `LocalPipeline`).

The patch: `SmithyRule._compile_builder` returns a builder that compiles werkzeug's own on its
first call, then calls it: a rule builds the same URL as before if anything ever asks it to.
Only moto's rule class is patched; werkzeug's `Rule`, which an app or a tool may use, is not.
"""

from collections.abc import Callable
from typing import Any

from moto.core.routing import SmithyRule
from werkzeug.routing import Rule

CHECKED_WITH = ("5.2.5",)

_original: Callable[..., Any] = Rule._compile_builder


def _compile_builder(self: Rule, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
    """werkzeug's builder for this rule, compiled when first called (`Rule.compile` binds it)."""
    compiled: list[Callable[..., tuple[str, str]]] = []

    def build(rule: Rule, *args: Any, **kwargs: Any) -> tuple[str, str]:
        if not compiled:
            compiled.append(_original(rule, append_unknown).__get__(rule, None))
        return compiled[0](*args, **kwargs)

    return build


def install() -> None:
    SmithyRule._compile_builder = _compile_builder  # type: ignore[method-assign]
