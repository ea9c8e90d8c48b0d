"""The interpreter's threads are not kept once they end.

moto: every thread the Step Functions interpreter started was appended to a module-level list
nothing reads or empties (`TMP_THREADS`).

Why it matters: each thread kept its worker, and through it the execution's state, for as long
as the process lived (~140 threads a ten-turn run): a long-lived `toolpipe serve` grew without
bound.

The patch: the list is replaced, wherever a module took it by name, by one that keeps nothing.
"""

import collections
import sys
from typing import Any

from moto.stepfunctions.parser import utils as stepfunctions_utils

CHECKED_WITH = ("5.2.5",)


def install() -> None:
    # Loads the modules that take the list by name, so that they are rebound below.
    import moto.stepfunctions.parser.asl.parse.preprocessor  # noqa: F401

    kept = stepfunctions_utils.TMP_THREADS
    not_kept: collections.deque[Any] = collections.deque(maxlen=0)  # appended to, keeps nothing
    # Modules imported the list by name: rebind it wherever it was taken, and at its source
    # for modules imported later.
    for module in list(sys.modules.values()):
        if getattr(module, "TMP_THREADS", None) is kept:
            module.TMP_THREADS = not_kept  # type: ignore[attr-defined]
    kept.clear()
