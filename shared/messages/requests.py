"""What a caller may send to start a run (`POST /runs`, the CLI, a trigger): every field bounded,
so a request can neither fill the history item nor reach the system prompt with text of its
choosing (the time zone is written into it)."""

import re
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from toolpipe.shared.messages.common import MaxDurationWaits, text_safe
from toolpipe.shared.messages.records import RunLimits

NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # agent and tool names (OpenAI function names allow the same)
TIMEZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$"  # no dots: no "../" paths
# An idempotency key: printable ASCII without spaces, as the IETF draft's examples and Stripe's keys.
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
MAX_PROMPT_CHARS = 100_000
# What Python's `str.strip()` removes (every character whose `isspace()` is true; a unit test
# re-measures it), as regex escapes: a text is blank when it has nothing else. A class of its
# own, not `\S`: the OpenAPI document's pattern then means the same in every regex dialect
# (ECMA's `\s` differs from Python's).
WHITESPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK_PATTERN = f"[^{WHITESPACE}]"
MAX_TOOLS = 128
# A year: Step Functions' own bound on a Standard execution.
MAX_DURATION_SECONDS = 365 * 24 * 3600
MAX_RUN_MCP_SERVERS = 5
# Metadata is a few labels, stored in the run record (one DynamoDB item): bounded in count and size.
MAX_METADATA_ENTRIES = 16
METADATA_KEY_PATTERN = r"^[A-Za-z0-9_.:/-]{1,64}$"
MAX_METADATA_VALUE_CHARS = 256
MetadataValue = Annotated[str, Field(max_length=MAX_METADATA_VALUE_CHARS)]
MetadataKey = Annotated[str, Field(pattern=METADATA_KEY_PATTERN)]


class StartRunRequest(BaseModel):
    """The body of `POST /runs`. The caller is not a field: it is the request's identity."""

    model_config = ConfigDict(extra="forbid")
    # `prompt` is the field's former name, still accepted (deprecated).
    input: str = Field(
        max_length=MAX_PROMPT_CHARS,
        validation_alias=AliasChoices("input", "prompt"),
        description="The user's message; not blank. (`prompt` is accepted as a deprecated alias.)",
        json_schema_extra={"pattern": NOT_BLANK_PATTERN},  # checked by `_not_blank`, which words the error
    )
    agent: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="A registered agent's name; omitted, the app's first agent.",
    )
    timezone: str = Field(
        default="UTC", max_length=64, description="The user's IANA time zone, e.g. Europe/Paris."
    )
    tools: list[Annotated[str, Field(pattern=NAME_PATTERN)]] | None = Field(
        default=None,
        max_length=MAX_TOOLS,
        description="Allow-list: the run may use only these of the agent's tools.",
    )
    # `\S+` and a length, not `\S{1,2000}`: pydantic-core's regex engine compiles a counted
    # repetition of a Unicode class into a large automaton (17 ms of every cold start).
    mcp_servers: list[Annotated[str, Field(pattern=r"^https?://\S+$", max_length=2008)]] | None = Field(
        default=None,
        max_length=MAX_RUN_MCP_SERVERS,
        description="MCP server URLs (streamable HTTP) whose tools this run offers too, named mcp_<tool> "
        "(mcp1_, mcp2_... for several). Refused unless the deployment allows it "
        "(TOOLPIPE_ALLOW_RUN_MCP_SERVERS): the workers would call any URL a caller names.",
    )
    max_duration: int | None = Field(
        default=None,
        strict=True,  # a number of seconds: not "5", 5.0 or true (a 1-second run)
        ge=1,
        le=MAX_DURATION_SECONDS,
        description="Wall-clock seconds the run may take; past them the run ends `limit`. At most "
        "the agent's own `max_duration`, when it has one. Whether time waiting for a person or a "
        "program counts: `max_duration_waits`.",
    )
    max_duration_waits: MaxDurationWaits | None = Field(
        default=None,
        description="`count` (the default): time the run waits for a person or a program (an "
        "approval, a question, a client-executed call's result) counts toward `max_duration`, as "
        "its caller waits for the run whoever it waits for. `exclude`: only the run's own time "
        "counts. `count` wins when either this or the agent's `max_duration_waits` asks for it.",
    )
    metadata: dict[MetadataKey, MetadataValue] | None = Field(
        default=None,
        max_length=MAX_METADATA_ENTRIES,
        description=f"Your own labels, stored with the run and returned by GET: at most "
        f"{MAX_METADATA_ENTRIES} entries, keys 1-64 of [A-Za-z0-9_.:/-], values at most "
        f"{MAX_METADATA_VALUE_CHARS} characters.",
    )

    @model_validator(mode="before")
    @classmethod
    def _caller_is_not_a_field(cls, data: Any) -> Any:
        # Before `extra="forbid"` answers "Extra inputs are not permitted": say where it comes from.
        if isinstance(data, dict) and "caller" in data:
            raise PydanticCustomError(
                "caller_from_identity",
                "caller is not a body field: the caller comes from the request's identity (IAM)",
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def _one_name_for_the_input(cls, data: Any) -> Any:
        if isinstance(data, dict) and "input" in data and "prompt" in data:
            raise PydanticCustomError("input_twice", "send input or prompt (its deprecated name), not both")
        return data

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not re.search(NOT_BLANK_PATTERN, value):
            raise PydanticCustomError("blank", "the input is blank")
        return text_safe(value)

    @field_validator("timezone")
    @classmethod
    def _iana_zone(cls, value: str) -> str:
        # The pattern comes first: ZoneInfo opens a file named after the key.
        if value != "UTC" and not re.fullmatch(TIMEZONE_PATTERN, value):
            raise PydanticCustomError(
                "timezone", "not an IANA time zone name (such as 'Europe/Paris' or 'UTC')"
            )
        if value != "UTC":  # UTC needs no tz database, which a Lambda runtime may lack
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError, OSError) as e:
                raise PydanticCustomError(
                    "timezone",
                    "unknown time zone {zone} (use an IANA name such as 'Europe/Paris')",
                    {"zone": repr(value)},
                ) from e
        return value


class ResumeRunRequest(BaseModel):
    """The body of `POST /runs/{run_id}/resume` (optional: an empty body raises nothing)."""

    model_config = ConfigDict(extra="forbid")
    limits: RunLimits | None = Field(
        default=None,
        description='Limits to raise, named as the agent names them, e.g. {"max_tool_calls": 80}; '
        "each replaces the agent's own for the rest of the run.",
    )


class ForkRunRequest(BaseModel):
    """The body of `POST /runs/{run_id}/fork`."""

    model_config = ConfigDict(extra="forbid")
    turn: int = Field(
        ge=0,
        le=100_000,
        description="The fork's history is the run's first `turn` model turns (0: its first message "
        "only), copied: no tool of those turns runs again. The turn must be complete (every call "
        "answered).",
    )
    input: str | None = Field(
        default=None,
        max_length=MAX_PROMPT_CHARS,
        description="A new user message the fork goes on with; omitted, it goes on from the history.",
        json_schema_extra={"pattern": NOT_BLANK_PATTERN},
    )

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not re.search(NOT_BLANK_PATTERN, value):
            raise PydanticCustomError("blank", "the input is blank")
        return None if value is None else text_safe(value)
