"""The operations a run made that AWS bills, as counters that only ever grow.

Stored on one small item per run (`shared/history/costs.py`) by DynamoDB `ADD`: each counter is
one flat attribute (`COUNTER_NAMES`), so concurrent invocations add without reading, and the
item keeps a fixed, bounded size (a test holds it under 1 KB, one write unit per update).
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# The pipeline's functions, by role: the names counters are kept under. A deployed function's
# physical name is long and changes with the stack; its role does not.
FUNCTION_ROLES = ("api", "orchestrator", "tool_worker", "tool_runner", "triggers")
# Attribute prefixes of a function's counters on the item: `fn_req#<role>`, `fn_mbms#<role>`.
_REQUESTS = "fn_req#"
_MB_MS = "fn_mbms#"


class FunctionUse(BaseModel):
    """One function's share of a run: invocations, and billed duration x memory."""

    model_config = ConfigDict(frozen=True)

    requests: int = 0
    # Billed milliseconds x configured MB: an integer, where GB-ms (what AWS prices) would need
    # fractions for any memory that is not a whole number of GB (512 MB: 0.5 GB-ms a ms).
    mb_ms: int = 0

    @property
    def gb_seconds(self) -> float:
        return self.mb_ms / 1024 / 1000


class Operations(BaseModel):
    """What a run made that AWS bills (on-demand, us-east-1's price dimensions)."""

    model_config = ConfigDict(frozen=True)

    # Step Functions Standard bills each state entered.
    state_transitions: int = 0
    functions: dict[str, FunctionUse] = Field(default_factory=dict)
    dynamodb_requests: int = 0
    # DynamoDB on-demand request units. A read unit is 4 KB strongly consistent, half that
    # eventually consistent (hence halves); a write unit is 1 KB; transactions count double.
    read_units: float = 0
    write_units: int = 0
    # SQS bills a request per 64 KB chunk of its payload.
    sqs_requests: int = 0
    # S3 tier 1: PUT, COPY, POST, LIST; tier 2: GET, HEAD and the rest.
    s3_tier1_requests: int = 0
    s3_tier2_requests: int = 0
    # EventBridge custom events: each PutEvents entry, per 64 KB chunk.
    events: int = 0
    api_requests: int = 0

    def __add__(self, other: "Operations") -> "Operations":
        return Operations.from_counters(_sum(self.counters(), other.counters()))

    def is_empty(self) -> bool:
        return not any(self.counters().values())

    def counters(self) -> dict[str, int | float]:
        """Every non-zero counter as one flat attribute name (the item's)."""
        flat: dict[str, int | float] = {
            name: value for name, value in self.model_dump(exclude={"functions"}).items() if value
        }
        for role, use in self.functions.items():
            if use.requests:
                flat[_REQUESTS + role] = use.requests
            if use.mb_ms:
                flat[_MB_MS + role] = use.mb_ms
        return flat

    @classmethod
    def from_counters(cls, item: dict[str, Any]) -> "Operations":
        """The counters of a stored item (other attributes are ignored)."""
        plain: dict[str, Any] = {}
        functions: dict[str, dict[str, int]] = {}
        for name, value in item.items():
            if name.startswith(_REQUESTS):
                functions.setdefault(name.removeprefix(_REQUESTS), {})["requests"] = int(value)
            elif name.startswith(_MB_MS):
                functions.setdefault(name.removeprefix(_MB_MS), {})["mb_ms"] = int(value)
            elif name in COUNTER_NAMES:
                plain[name] = float(value) if name == "read_units" else int(value)
        return cls(**plain, functions={role: FunctionUse(**use) for role, use in functions.items()})


COUNTER_NAMES = frozenset(name for name in Operations.model_fields if name != "functions")


def _sum(a: dict[str, int | float], b: dict[str, int | float]) -> dict[str, int | float]:
    return {name: a.get(name, 0) + b.get(name, 0) for name in a.keys() | b.keys()}
