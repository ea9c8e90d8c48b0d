"""Runs started by S3 objects and EventBridge events, and the answers they write back.

Deduplication is `RunStarter`'s idempotency key, never a mechanism of its own: one run per
object write (`S3ObjectCreated.identity`: bucket, key and version, or the sequencer in an
unversioned bucket) and one per EventBridge event id, however often either is delivered.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from botocore.exceptions import ClientError

from toolpipe.shared.agents.read_input import MAX_READ_BYTES, read_input
from toolpipe.shared.messages import InputObject, RunRecord, RunStatus, StartRunRequest
from toolpipe.shared.runs.starter import RunStarter
from toolpipe.shared.settings import TriggerSettings
from toolpipe.shared.triggers.events import RunRequested, S3ObjectCreated

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

S3_CALLER = "trigger:s3"
EVENTS_CALLER = "trigger:eventbridge"
ANSWER_SUFFIX = ".answer.md"
ERROR_SUFFIX = ".error.md"
# Object metadata naming the run an answer came from: how a retried ending finds it written.
RUN_ID_METADATA = "toolpipe-run-id"


@dataclass(frozen=True)
class ObjectHead:
    size: int
    content_type: str | None
    etag: str | None
    version_id: str | None
    metadata: dict[str, str]


class ObjectStore(Protocol):
    """The few S3 calls the triggers make."""

    def head(self, bucket: str, key: str, version_id: str | None = None) -> ObjectHead | None:
        """The object's head, or None if it (or that version) does not exist."""
        ...

    def put_if(self, bucket: str, key: str, body: str, metadata: dict[str, str], etag: str | None) -> bool:
        """Write only if the object is still as seen: absent (`etag` None) or at `etag`.
        False if another write came first."""
        ...


class S3ObjectStore:
    def __init__(self, client: "S3Client") -> None:
        self._client = client

    def head(self, bucket: str, key: str, version_id: str | None = None) -> ObjectHead | None:
        try:
            extra: dict[str, Any] = {"VersionId": version_id} if version_id else {}
            head = self._client.head_object(Bucket=bucket, Key=key, **extra)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NoSuchVersion"}:
                return None
            raise
        return ObjectHead(
            size=int(head.get("ContentLength", 0)),
            content_type=head.get("ContentType"),
            etag=head.get("ETag"),
            version_id=head.get("VersionId"),
            metadata=dict(head.get("Metadata", {})),
        )

    def put_if(self, bucket: str, key: str, body: str, metadata: dict[str, str], etag: str | None) -> bool:
        # S3 conditional writes: two endings racing cannot both write, and neither overwrites
        # an answer it has not seen (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html).
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            self._client.put_object(
                Bucket=bucket,
                Key=key,
                Body=body.encode("utf-8"),
                ContentType="text/markdown; charset=utf-8",
                Metadata=metadata,
                **condition,  # type: ignore[arg-type]
            )
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code in {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}:
                return False
            raise
        return True


Outcome = Literal["started", "replayed", "skipped"]


@dataclass(frozen=True)
class TriggerResult:
    outcome: Outcome
    run_id: str | None = None
    reason: str | None = None  # why nothing started (skipped)


class TriggerService:
    """Starts the run an object or an event asks for."""

    def __init__(self, starter: RunStarter, objects: ObjectStore, settings: TriggerSettings) -> None:
        self._starter = starter
        self._objects = objects
        self._settings = settings

    def object_created(self, created: S3ObjectCreated) -> TriggerResult:
        """One run of the configured agent per object write; objects that are not files under
        the input prefix, or are empty or too large, are skipped with the reason."""
        settings = self._settings
        where = f"s3://{created.bucket}/{created.key}"
        if settings.bucket is not None and created.bucket != settings.bucket:
            return _skipped(f"{where}: not the trigger bucket ({settings.bucket})")
        if not created.key.startswith(settings.input_prefix):
            return _skipped(f"{where}: outside the input prefix {settings.input_prefix!r}")
        if created.key.endswith("/"):
            return _skipped(f"{where}: a folder, not a file")
        if created.size == 0:
            return _skipped(f"{where}: empty (0 bytes)")
        if created.size > settings.max_object_bytes:
            return _skipped(
                f"{where}: {created.size} bytes, over the limit of {settings.max_object_bytes} "
                "(TOOLPIPE_TRIGGER_MAX_OBJECT_BYTES)"
            )
        identity = created.identity  # raises when duplicates could not be told apart
        head = self._objects.head(created.bucket, created.key, created.version_id)
        if head is None:
            return _skipped(f"{where}: deleted before its run could start")
        if (
            created.version_id is None
            and created.etag
            and head.etag
            and head.etag.strip('"') != created.etag.strip('"')
        ):
            # Unversioned and overwritten since: the newer write has a notification of its own.
            return _skipped(f"{where}: overwritten since this notification")
        source = InputObject(
            bucket=created.bucket,
            key=created.key,
            version_id=created.version_id,
            size=created.size,
            content_type=head.content_type,
            etag=created.etag or head.etag,
            # inbox/a/b.txt -> answers/a/b.txt(.answer.md): the input's place under the output prefix.
            answer_key=settings.output_prefix + created.key.removeprefix(settings.input_prefix),
        )
        request = _request(settings.agent, file_prompt(settings.instructions, source))
        started = self._starter.start(
            request, settings.principal or S3_CALLER, idempotency_key=identity, input_object=source
        )
        return TriggerResult("replayed" if started.replayed else "started", started.record.run_id)

    def run_requested(self, event: RunRequested) -> TriggerResult:
        """One run per event id, or per the sender's own key when it gives one (its retries
        are new events), owned by the configured principal."""
        key = event.detail.idempotency_key
        started = self._starter.start(
            event.detail.start_request(),
            self._settings.principal or EVENTS_CALLER,
            idempotency_key=f"eventbridge-key:{key}" if key else f"eventbridge:{event.event_id}",
        )
        return TriggerResult("replayed" if started.replayed else "started", started.record.run_id)


def _skipped(reason: str) -> TriggerResult:
    return TriggerResult("skipped", reason=reason)


def _request(agent: str | None, text: str) -> StartRunRequest:
    return StartRunRequest.model_validate({"input": text, "agent": agent})


def file_prompt(instructions: str, source: InputObject) -> str:
    """The user message of a run an object started: where the file is, never what it holds."""
    version = f", version {source.version_id}" if source.version_id else ""
    kind = source.content_type or "unknown type"
    return (
        f"{instructions}\n\nThe file: s3://{source.bucket}/{source.key}{version} "
        f"({source.size} bytes, {kind}). It is not in this message: read it with the "
        f"{read_input.name} tool, at most {MAX_READ_BYTES} bytes a call."
    )


def answer_text(run: RunRecord, output: str | None) -> str:
    if run.status is RunStatus.SUCCEEDED:
        return output or ""
    return f"The run {run.run_id} ended {run.status.value}: {run.error or 'no reason recorded'}\n"


class AnswerWriter:
    """Writes a triggered run's ending under the output prefix, once: the object names the run
    in its metadata, so a retried ending finds it written; a conditional write keeps two
    endings of the same run from both writing. Runs of two versions of one key write the same
    answer key: the later ending replaces the earlier (its metadata names the run and version).

    It never asks about a key that may be missing: S3 answers such a HEAD with 403, not 404, to
    a role without `s3:ListBucket` on the bucket (the orchestrator's). It creates the answer
    (`If-None-Match: *`) and only when one exists reads it, to stop or replace it (`If-Match`)."""

    ATTEMPTS = 3

    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects

    def write(self, run: RunRecord, output: Callable[[], str | None]) -> bool:
        """Write `run`'s (ended) answer; False if it was already written. `output` reads the
        whole answer, called only for an ended run of an object."""
        source = run.input_object
        if source is None or run.status is RunStatus.RUNNING:
            return False
        key = source.answer_key + (ANSWER_SUFFIX if run.status is RunStatus.SUCCEEDED else ERROR_SUFFIX)
        metadata = {RUN_ID_METADATA: run.run_id, "toolpipe-status": run.status.value}
        if source.version_id:
            metadata["toolpipe-source-version"] = source.version_id
        text = answer_text(run, output())
        for _ in range(self.ATTEMPTS):
            if self._objects.put_if(source.bucket, key, text, metadata, None):
                return True
            # There is one: this run's (a retried ending) or an earlier run's, to replace.
            head = self._objects.head(source.bucket, key)
            if head is None:
                continue  # deleted since: create it again
            if head.metadata.get(RUN_ID_METADATA) == run.run_id:
                return False
            if self._objects.put_if(source.bucket, key, text, metadata, head.etag):
                return True
        # A system error: the orchestrator's step fails and Step Functions retries it.
        raise RuntimeError(f"s3://{source.bucket}/{key}: another write kept winning")
