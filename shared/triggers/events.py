"""What starts a triggered run, parsed from the events Lambda receives.

- An S3 event notification (S3 -> Lambda): `{"Records": [{"eventSource": "aws:s3", ...}]}`.
- The same, routed through EventBridge (`source: aws.s3`, `detail-type: Object Created`), so a
  bucket that sends its events to EventBridge can be wired to the same function.
- `detail-type: RunRequested` from a source the stack accepts (`TriggerSettings.sources`, by
  default `toolpipe.requests`): a run request (`RunRequestedDetail`), put on the stack's bus by a
  service or by EventBridge Scheduler. Not `toolpipe`, the run events' own source: a function may
  put run events, never a request (infra/cdk/constructs/events.py).

Only the fields toolpipe uses are read, so a notification with fewer fields (a replayed or
hand-written one) still works; every field it uses is checked.
"""

import json
import urllib.parse
from collections.abc import Collection
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from toolpipe.shared.errors import ToolpipeError, describe_validation_error
from toolpipe.shared.messages import (
    IDEMPOTENCY_KEY_PATTERN,
    MAX_METADATA_ENTRIES,
    MAX_PROMPT_CHARS,
    MAX_TOOLS,
    NAME_PATTERN,
    MetadataKey,
    MetadataValue,
    StartRunRequest,
)
from toolpipe.shared.settings import RUN_REQUESTED_SOURCE

RUN_REQUESTED_DETAIL_TYPE = "RunRequested"
S3_EVENT_SOURCE = "aws.s3"
S3_OBJECT_CREATED = "Object Created"
M = TypeVar("M", bound=BaseModel)


class TriggerEventError(ToolpipeError, ValueError):
    """An event that can never start a run (malformed, or of a kind not handled): retrying it
    changes nothing, so it is logged once and dropped."""


class S3ObjectCreated(BaseModel):
    """One created object, from either notification shape."""

    model_config = ConfigDict(frozen=True)
    bucket: str = Field(min_length=3, max_length=63)
    key: str = Field(min_length=1, max_length=1024)
    size: int = Field(ge=0)
    etag: str | None = None
    version_id: str | None = None
    # Orders the events of one key; the same write's duplicate notifications share it.
    sequencer: str | None = None

    @property
    def identity(self) -> str:
        """One write of one object: what its run's idempotency key is made from. The version
        when the bucket is versioned; else the sequencer, which S3 gives every write of a key
        and repeats in a duplicate notification of the same write."""
        if self.version_id and self.version_id != "null":
            return f"s3://{self.bucket}/{self.key}#version={self.version_id}"
        if self.sequencer:
            return f"s3://{self.bucket}/{self.key}#sequencer={self.sequencer}"
        raise TriggerEventError(
            f"s3://{self.bucket}/{self.key}: the notification has neither versionId nor sequencer, "
            "so its duplicates could not be told apart"
        )


class _S3Object(BaseModel):
    key: str
    size: int = Field(ge=0)
    eTag: str | None = None
    versionId: str | None = None
    sequencer: str | None = None


class _S3Bucket(BaseModel):
    name: str


class _S3Entity(BaseModel):
    bucket: _S3Bucket
    object: _S3Object


class _S3Record(BaseModel):
    eventSource: Literal["aws:s3"]
    eventName: str
    s3: _S3Entity


class _S3Notification(BaseModel):
    Records: list[_S3Record] = Field(min_length=1)


class _S3DetailObject(BaseModel):
    key: str
    size: int = Field(ge=0)
    etag: str | None = None
    version_id: str | None = Field(default=None, alias="version-id")
    sequencer: str | None = None


class _S3Detail(BaseModel):
    bucket: _S3Bucket
    object: _S3DetailObject


class RunRequestedDetail(BaseModel):
    """The `detail` of a `RunRequested` event (from a source the stack accepts): one run of
    `agent` on `input`. Its JSON Schema is checked in as docs/events/RunRequested.json."""

    model_config = ConfigDict(extra="forbid", title="RunRequested")
    agent: str = Field(pattern=NAME_PATTERN, description="A registered agent's name.")
    input: str = Field(
        min_length=1, max_length=MAX_PROMPT_CHARS, description="The user's message; not blank."
    )
    tools: list[Annotated[str, Field(pattern=NAME_PATTERN)]] | None = Field(
        default=None,
        max_length=MAX_TOOLS,
        description="Allow-list: the run may use only these of the agent's tools.",
    )
    timezone: str = Field(
        default="UTC", max_length=64, description="The user's IANA time zone, e.g. Europe/Paris."
    )
    idempotency_key: str | None = Field(
        default=None,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="The sender's own key for this request: one run per key however often it is sent. "
        "EventBridge gives each PutEvents a new event id, so a sender that retries a PutEvents "
        "whose answer it lost sends a second event; with the same key it still starts one run.",
    )
    metadata: dict[MetadataKey, MetadataValue] | None = Field(
        default=None,
        max_length=MAX_METADATA_ENTRIES,
        description="Your own labels for the run, kept on it as a POST /runs body's (at most 16; keys "
        "1-64 of [A-Za-z0-9_.:/-], values at most 256 characters); toolpipe does not read them.",
    )

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the input is blank")
        return value

    def start_request(self) -> StartRunRequest:
        """The run request this detail asks for, checked as `POST /runs` checks a body."""
        fields: dict[str, Any] = {
            "agent": self.agent,
            "input": self.input,
            "timezone": self.timezone,
            "tools": self.tools,
            "metadata": self.metadata,  # kept on the run, as a POST /runs body's
        }
        try:
            return StartRunRequest.model_validate(fields)
        except ValidationError as e:
            raise TriggerEventError(
                f"invalid RunRequested detail: {describe_validation_error(e, 'detail')}"
            ) from e


def run_requested_schema() -> str:
    """docs/events/RunRequested.json, as checked in (a test holds the file to this)."""
    schema = RunRequestedDetail.model_json_schema()
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "description": f"The detail of an EventBridge event with detail-type '{RUN_REQUESTED_DETAIL_TYPE}' "
        f"and a source the stack accepts ('{RUN_REQUESTED_SOURCE}' unless it names others): one run of "
        "`agent` on `input`, one per event id.",
    }
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


class RunRequested(BaseModel):
    model_config = ConfigDict(frozen=True)
    event_id: str
    account: str | None
    detail: RunRequestedDetail


class S3TestEvent(BaseModel):
    """What S3 sends once when a notification is configured: nothing to run."""


class _Envelope(BaseModel):
    id: str = Field(min_length=1, max_length=256)
    source: str
    detail_type: str = Field(alias="detail-type")
    account: str | None = None
    detail: Any = None


TriggerEvent = list[S3ObjectCreated] | RunRequested | S3TestEvent


def parse_trigger_event(event: Any, sources: Collection[str] = (RUN_REQUESTED_SOURCE,)) -> TriggerEvent:
    """The event as what it asks for; a `RunRequested` only from one of `sources` (the stack's
    rule matches those alone: this holds for an event delivered another way). Raises
    `TriggerEventError` with a one-line reason."""
    if not isinstance(event, dict):
        raise TriggerEventError(f"the event is a JSON {type(event).__name__}, not an object")
    if event.get("Event") == "s3:TestEvent":
        return S3TestEvent()
    if "Records" in event:
        notification = _validated(_S3Notification, event, "S3 notification")
        return [_created(r.s3.bucket.name, r.s3.object, r.eventName) for r in notification.Records]
    if "detail-type" in event:
        envelope = _validated(_Envelope, event, "EventBridge event")
        if envelope.source == S3_EVENT_SOURCE and envelope.detail_type == S3_OBJECT_CREATED:
            detail = _validated(_S3Detail, envelope.detail, "Object Created detail")
            entity = _S3Object(
                key=detail.object.key,
                size=detail.object.size,
                eTag=detail.object.etag,
                versionId=detail.object.version_id,
                sequencer=detail.object.sequencer,
            )
            # EventBridge gives the key as it is; an S3 notification gives it URL-encoded.
            return [_created(detail.bucket.name, entity, "ObjectCreated", encoded=False)]
        accepted = " or ".join(repr(source) for source in sources)
        if envelope.detail_type == RUN_REQUESTED_DETAIL_TYPE:
            if envelope.source not in sources:
                raise TriggerEventError(
                    f"RunRequested from source {envelope.source!r} is not accepted: this stack takes it "
                    f"from {accepted} (trigger_sources)"
                )
            detail_model = _validated(RunRequestedDetail, envelope.detail, "RunRequested detail")
            return RunRequested(event_id=envelope.id, account=envelope.account, detail=detail_model)
        raise TriggerEventError(
            f"unexpected event: source {envelope.source!r}, detail-type {envelope.detail_type!r} "
            f"(expected {RUN_REQUESTED_DETAIL_TYPE!r} from {accepted})"
        )
    raise TriggerEventError("not an S3 notification nor an EventBridge event (no Records, no detail-type)")


def _validated(model: type[M], value: Any, what: str) -> M:
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise TriggerEventError(f"invalid {what}: {describe_validation_error(e, 'detail')}") from e


def _created(bucket: str, entity: _S3Object, event_name: str, encoded: bool = True) -> S3ObjectCreated:
    if not event_name.startswith("ObjectCreated"):
        raise TriggerEventError(f"unexpected S3 event {event_name!r} (only ObjectCreated starts a run)")
    # Keys arrive URL-encoded, spaces as '+' (https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html).
    key = urllib.parse.unquote_plus(entity.key) if encoded else entity.key
    return _validated(
        S3ObjectCreated,
        {
            "bucket": bucket,
            "key": key,
            "size": entity.size,
            "etag": entity.eTag,
            "version_id": entity.versionId,
            "sequencer": entity.sequencer,
        },
        "S3 object",
    )
