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
    return _preview(content, limit, f"Whole result stored as {ref}."), ref, len(content)


def unstored_preview(agent: Agent, content: str, reason: str) -> tuple[str, None, int]:
    """What the model reads of a long result whose whole could not be stored."""
    limit = agent.max_result_chars or len(content)
    return _preview(content, limit, f"The whole result could not be stored ({reason})."), None, len(content)


def _preview(content: str, limit: int, where: str) -> str:
    """The beginning of a long result, and a line saying how long it is and where the rest is."""
    return f"{content[:limit]}\n[… result truncated: {len(content)} characters in all, the first {limit} shown. {where}]"
