"""A state machine definition is parsed once, not once per execution.

moto: the whole definition is parsed again (ANTLR, in Python) for every execution: ~35 ms, a
tenth of a ten-turn run.

Why it matters: every run is an execution.

The patch: programs are kept per definition text. Their components hold the definition only;
an execution's state lives in its environment. The one thing a component set on first use, the
key of its slot in an environment's heap (retry counters), was a random id drawn then: a race
once executions share the component. The key is the component's identity instead.
"""

import functools

from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

from toolpipe.infra.local.patches.speed import parsed_programs

CHECKED_WITH = ("5.2.5",)

# Kept per definition text (a runtime has one state machine; tests create a few dozen), and
# across processes on disk (parsed_programs.py): the disk is asked once per definition.
cached_program_parse = functools.lru_cache(maxsize=64)(
    parsed_programs.through_disk(AmazonStateLanguageParser.parse)
)


def _heap_key(self: EvalComponent) -> str:
    # Unique while the component lives, the same from every thread (moto drew it lazily).
    return f"{type(self).__name__}-{id(self)}"


def install() -> None:
    AmazonStateLanguageParser.parse = staticmethod(cached_program_parse)  # type: ignore[method-assign]
    EvalComponent.heap_key = property(_heap_key)  # type: ignore[method-assign, assignment]
