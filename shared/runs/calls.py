"""Call identity: a call is its history slot, never the id the model gave it.

Models and OpenAI-compatible servers repeat ids within a reply (`call_0` three times), reuse
them across turns, send empty ones or none. The slot is what dispatch, claims, results and
idempotency keys use; the model is shown ids that are unique within the run, its own where
they already are, so every call it sees has exactly one result.
"""

import re

from toolpipe.shared.messages import AssistantMessage, HistoryItem, ToolCall

# What we keep of a model's id: anything else (empty, huge, odd characters) is replaced.
_USABLE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
# Tool names are at most 64 characters on the wire; a longer one is unknown anyway.
_NAME_CHARS = 256


def result_slot(reply: AssistantMessage, index: int) -> int:
    """The history slot reserved for the result of the reply's `index`-th call."""
    return reply.seq + 1 + index


def assign_call_ids(calls: list[ToolCall], reply_seq: int, history: list[HistoryItem]) -> list[ToolCall]:
    """The calls with ids unique within the run; the model's id is kept in `model_id` when replaced."""
    taken = {c.id for item in history if isinstance(item, AssistantMessage) for c in item.tool_calls}
    assigned = []
    for index, call in enumerate(calls):
        name = call.name[:_NAME_CHARS]
        if _USABLE_ID.match(call.id) and call.id not in taken:
            assigned.append(call.model_copy(update={"name": name}))
            taken.add(call.id)
            continue
        new_id = f"call_s{reply_seq + 1 + index}"
        while new_id in taken:
            new_id += "_"
        taken.add(new_id)
        assigned.append(call.model_copy(update={"id": new_id, "model_id": call.id[:128], "name": name}))
    return assigned
