"""A name is turned into snake case once.

moto: per request, the action's name is turned into snake case with regular expressions; so
is each of a queue's 14 attribute names, three times for each message an SQS `ReceiveMessage`
returns (its retention is checked against the queue's attributes, all of them built three
times): ~40 conversions, a third of that request's CPU.

Why it matters: it is paid by every request moto serves, and by every call's message, for the
same few names.

The patch: names are converted once each (at most 4,096 kept, the last used). moto's modules
take the function by name, so those already imported are given the kept one, and those
imported later take it from `moto.core.utils`.
"""

import functools
import sys

from moto.core import utils

CHECKED_WITH = ("5.2.5",)

_original = utils.camelcase_to_underscores


def install() -> None:
    snake_case = functools.lru_cache(maxsize=4096)(_original)
    utils.camelcase_to_underscores = snake_case
    for name, module in list(sys.modules.items()):
        if name.startswith("moto.") and getattr(module, "camelcase_to_underscores", None) is _original:
            setattr(module, "camelcase_to_underscores", snake_case)  # noqa: B010  # taken by name there
