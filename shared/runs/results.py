"""What the model reads of a long result: its beginning, and where the whole is kept."""

from toolpipe.shared.agents import Agent
from toolpipe.shared.history.ports import Contents


def fit_for_model(
    contents: Contents, agent: Agent, run_id: str, seq: int, content: str
) -> tuple[str, str | None, int | None]:
    """(what the model reads, the S3 key of the whole result, its length) — the last two only
    when the result is longer than the agent's `max_result_chars`."""
    limit = agent.max_result_chars
    if limit is None or len(content) <= limit:
        return content, None, None
    ref = contents.put_result(run_id, seq, content)
    preview = (
        f"{content[:limit]}\n[… result truncated: {len(content)} characters in all, "
        f"the first {limit} shown. Whole result stored as {ref}.]"
    )
    return preview, ref, len(content)


def unstored_preview(agent: Agent, content: str, reason: str) -> tuple[str, None, int]:
    """What the model reads of a long result whose whole could not be stored."""
    limit = agent.max_result_chars or len(content)
    preview = (
        f"{content[:limit]}\n[… result truncated: {len(content)} characters in all, the first "
        f"{limit} shown. The whole result could not be stored ({reason}).]"
    )
    return preview, None, len(content)
