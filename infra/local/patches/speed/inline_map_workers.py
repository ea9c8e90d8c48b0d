"""An inline Map starts one worker per item, up to its concurrency.

moto: an inline Map started `MaxConcurrency` worker threads whatever its number of items (ten
for a turn of one call; each thread's start waits for it to run); the workers with no item to
take did nothing.

Why it matters: every turn's tool calls go through an inline Map.

The patch: with fewer items than the concurrency, the Map runs as with no limit, which moto
reads as one worker per item.
"""

from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.inline_iteration_component import (
    InlineIterationComponent,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.max_concurrency import (
    DEFAULT_MAX_CONCURRENCY_VALUE,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment

CHECKED_WITH = ("5.2.5",)

_inline_map_body = InlineIterationComponent._eval_body


def _inline_map_body_one_worker_per_item(self: InlineIterationComponent, env: Environment) -> None:
    # What moto's body pops: the items and the concurrency. Changing it is safe: the Map state
    # builds a new one for each attempt, and nothing but the worker count reads the concurrency.
    eval_input = env.stack[-1]
    items = len(eval_input.input_items)
    if items < eval_input.max_concurrency:
        # "No limit" is what moto reads as one worker per item.
        eval_input.max_concurrency = DEFAULT_MAX_CONCURRENCY_VALUE
    _inline_map_body(self, env)


def install() -> None:
    InlineIterationComponent._eval_body = _inline_map_body_one_worker_per_item  # type: ignore[method-assign]
