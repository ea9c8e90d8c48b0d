"""A JSONPath expression is parsed once per text.

moto: the interpreter builds a new JSONPath parser for every expression it evaluates (~0.3 ms
each: ply's lexer and parser built again).

Why it matters: the state machine evaluates dozens of paths a turn.

The patch: parsed expressions are kept per text (jsonpath_ng's expressions do not change when
used), rebinding the `parse` each module looks up (imported there, not exported).
"""

import functools

from jsonpath_ng.ext.parser import parse as jsonpath_ext_parse
from jsonpath_ng.parser import parse as jsonpath_parse
from moto.stepfunctions.parser.asl.component.common.path import result_path
from moto.stepfunctions.parser.asl.utils import json_path

CHECKED_WITH = ("5.2.5",)

cached_parse = functools.lru_cache(maxsize=1024)(jsonpath_ext_parse)
cached_result_path_parse = functools.lru_cache(maxsize=1024)(jsonpath_parse)


def install() -> None:
    json_path.parse = cached_parse  # type: ignore[attr-defined]
    result_path.parse = cached_result_path_parse  # type: ignore[attr-defined]
