"""Run history in one DynamoDB table: one item per message, appended, never rewritten.

Keys: `pk=RUN#<id>` with `sk=META` (the run record), `sk=MSG#<seq:06d>` (one history item
each) and `sk=CALL#<seq:06d>` (a claim that keeps a duplicate SQS delivery from running a
tool twice). An item whose JSON would pass `inline_content_limit` is stored in S3 and the
DynamoDB item keeps a reference: items stop at 400 KB.
"""

import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from shared.errors import RunNotFoundError
from shared.messages import HISTORY_ITEM, HistoryItem, RunRecord, RunStatus, Usage, utc_now

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table
    from mypy_boto3_s3.client import S3Client

MSG_PREFIX = "MSG#"


def _pk(run_id: str) -> str:
    return f"RUN#{run_id}"


def _msg_sk(seq: int) -> str:
    return f"{MSG_PREFIX}{seq:06d}"


def _is_conditional_failure(e: ClientError) -> bool:
    code = e.response.get("Error", {}).get("Code")
    return code in ("ConditionalCheckFailedException", "TransactionCanceledException")


class HistoryStore(Protocol):
    def create_run(self, record: RunRecord, first: HistoryItem) -> bool: ...
    def get_run(self, run_id: str) -> RunRecord: ...
    def load_history(self, run_id: str) -> list[HistoryItem]: ...
    def get_item(self, run_id: str, seq: int) -> HistoryItem | None: ...
    def append(self, run_id: str, item: HistoryItem) -> bool: ...
    def record_model_call(
        self, run_id: str, turn: int, prompt_tokens: int, completion_tokens: int, cost_micro_usd: int
    ) -> None: ...
    def finish_run(
        self, run_id: str, status: RunStatus, output: str | None = None, error: str | None = None
    ) -> None: ...
    def put_parent_token(self, run_id: str, token: str) -> None: ...
    def get_parent_token(self, run_id: str) -> str | None: ...
    def put_result(self, run_id: str, seq: int, content: str) -> str: ...
    def get_result(self, key: str) -> str: ...
    def load_state(self, run_id: str) -> dict[str, Any]: ...
    def save_state(self, run_id: str, changed: dict[str, Any], removed: list[str]) -> None: ...
    def claim_call(self, run_id: str, seq: int, lease_seconds: int) -> bool: ...
    def release_call(self, run_id: str, seq: int) -> None: ...

    # --- reading a run page by page (the runs API) ---
    def iter_history(self, run_id: str, after: int = 0) -> Iterator[HistoryItem]: ...
    def stored_message_key(self, run_id: str, seq: int) -> str | None: ...


class DynamoHistoryStore:
    def __init__(self, table: "Table", s3: "S3Client", bucket: str, inline_limit: int = 100_000) -> None:
        self._table = table
        self._s3 = s3
        self._bucket = bucket
        self._inline_limit = inline_limit

    # --- run record -----------------------------------------------------------------------

    def create_run(self, record: RunRecord, first: HistoryItem) -> bool:
        """Write the run record and its first message together; False if the run exists."""
        meta = {
            "pk": _pk(record.run_id),
            "sk": "META",
            **record.model_dump(mode="json", exclude={"usage"}),
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "model_calls": 0,
            "cost_micro_usd": 0,
        }
        meta = {k: v for k, v in meta.items() if v is not None}
        client = self._table.meta.client
        try:
            client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._table.name,
                            "Item": meta,
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {
                        "Put": {
                            "TableName": self._table.name,
                            "Item": self._message_item(record.run_id, first),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )
        except ClientError as e:
            if _is_conditional_failure(e):
                return False
            raise
        return True

    def get_run(self, run_id: str) -> RunRecord:
        item = self._table.get_item(Key={"pk": _pk(run_id), "sk": "META"}, ConsistentRead=True).get("Item")
        if item is None:
            raise RunNotFoundError(run_id)
        data = {k: _plain(v) for k, v in item.items() if k not in ("pk", "sk")}
        data["usage"] = Usage(
            prompt_tokens=data.pop("prompt_tokens", 0),
            completion_tokens=data.pop("completion_tokens", 0),
            model_calls=data.pop("model_calls", 0),
            cost_micro_usd=data.pop("cost_micro_usd", 0),
        )
        return RunRecord.model_validate(data)

    def record_model_call(
        self, run_id: str, turn: int, prompt_tokens: int, completion_tokens: int, cost_micro_usd: int
    ) -> None:
        self._table.update_item(
            Key={"pk": _pk(run_id), "sk": "META"},
            UpdateExpression="ADD prompt_tokens :p, completion_tokens :c, model_calls :one, cost_micro_usd :cost "
            "SET turn = :t, updated_at = :now",
            ExpressionAttributeValues={
                ":p": prompt_tokens,
                ":c": completion_tokens,
                ":one": 1,
                ":cost": cost_micro_usd,
                ":t": turn,
                ":now": utc_now(),
            },
        )

    def finish_run(
        self, run_id: str, status: RunStatus, output: str | None = None, error: str | None = None
    ) -> None:
        # status, output and error are DynamoDB reserved words: every name goes through "#".
        changes: dict[str, Any] = {
            "status": status.value,
            "updated_at": utc_now(),
            "output": output,
            "error": error,
        }
        changes = {name: value for name, value in changes.items() if value is not None}
        try:
            self._table.update_item(
                Key={"pk": _pk(run_id), "sk": "META"},
                UpdateExpression="SET " + ", ".join(f"#{name} = :{name}" for name in changes),
                # A run ends once: a retried step must not overwrite the first ending.
                ConditionExpression="#status = :running",
                ExpressionAttributeNames={f"#{name}": name for name in changes},
                ExpressionAttributeValues={
                    **{f":{name}": value for name, value in changes.items()},
                    ":running": RunStatus.RUNNING.value,
                },
            )
        except ClientError as e:
            if not _is_conditional_failure(e):
                raise

    # --- messages -------------------------------------------------------------------------

    def _message_item(self, run_id: str, item: HistoryItem) -> dict[str, Any]:
        data = HISTORY_ITEM.dump_json(item).decode()
        row: dict[str, Any] = {"pk": _pk(run_id), "sk": _msg_sk(item.seq), "kind": item.kind}
        if len(data.encode()) > self._inline_limit:
            key = f"runs/{run_id}/messages/{item.seq:06d}.json"
            self._s3.put_object(
                Bucket=self._bucket, Key=key, Body=data.encode(), ContentType="application/json"
            )
            row["data_ref"] = key
        else:
            row["data"] = data
        return row

    def _load(self, row: dict[str, Any]) -> HistoryItem:
        if "data_ref" in row:
            body = self._s3.get_object(Bucket=self._bucket, Key=str(row["data_ref"]))["Body"].read()
            return HISTORY_ITEM.validate_json(body)
        return HISTORY_ITEM.validate_json(str(row["data"]))

    def append(self, run_id: str, item: HistoryItem) -> bool:
        """Append at `item.seq`; False if that slot is taken (a retry or duplicate delivery)."""
        try:
            self._table.put_item(
                Item=self._message_item(run_id, item), ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as e:
            if _is_conditional_failure(e):
                return False
            raise
        return True

    def get_item(self, run_id: str, seq: int) -> HistoryItem | None:
        row = self._table.get_item(Key={"pk": _pk(run_id), "sk": _msg_sk(seq)}, ConsistentRead=True).get(
            "Item"
        )
        return None if row is None else self._load(row)

    def load_history(self, run_id: str) -> list[HistoryItem]:
        items: list[HistoryItem] = []
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :msg)",
            "ExpressionAttributeValues": {":pk": _pk(run_id), ":msg": MSG_PREFIX},
            "ConsistentRead": True,
        }
        while True:
            page = self._table.query(**kwargs)
            items.extend(self._load(row) for row in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # --- the task token a child run answers -----------------------------------------------

    def put_parent_token(self, run_id: str, token: str) -> None:
        # Kept apart from the run record, which the API returns: a token is a bearer credential.
        self._table.put_item(Item={"pk": _pk(run_id), "sk": "PARENT_TOKEN", "token": token})

    def get_parent_token(self, run_id: str) -> str | None:
        row = self._table.get_item(Key={"pk": _pk(run_id), "sk": "PARENT_TOKEN"}, ConsistentRead=True).get(
            "Item"
        )
        return None if row is None else str(row["token"])

    # --- whole tool results kept out of the model's context --------------------------------

    def put_result(self, run_id: str, seq: int, content: str) -> str:
        key = f"runs/{run_id}/results/{seq:06d}.txt"
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=content.encode(), ContentType="text/plain")
        return key

    def get_result(self, key: str) -> str:
        return self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read().decode()

    # --- per-run state tools share (ToolContext.state) ---------------------------------------

    def load_state(self, run_id: str) -> dict[str, Any]:
        row = self._table.get_item(Key={"pk": _pk(run_id), "sk": "STATE"}, ConsistentRead=True).get(
            "Item", {}
        )
        return {name[2:]: json.loads(str(value)) for name, value in row.items() if name.startswith("s_")}

    def save_state(self, run_id: str, changed: dict[str, Any], removed: list[str]) -> None:
        """One attribute per key, values as JSON text: parallel calls writing different keys
        do not overwrite each other, and numbers keep their type (no Decimal)."""
        if not changed and not removed:
            return
        names = {f"#k{i}": f"s_{key}" for i, key in enumerate(changed)}
        names |= {f"#r{i}": f"s_{key}" for i, key in enumerate(removed)}
        expression = ""
        if changed:
            expression += "SET " + ", ".join(f"#k{i} = :v{i}" for i in range(len(changed)))
        if removed:
            expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removed)))
        kwargs: dict[str, Any] = {"ExpressionAttributeNames": names}
        if changed:
            kwargs["ExpressionAttributeValues"] = {
                f":v{i}": json.dumps(value) for i, value in enumerate(changed.values())
            }
        self._table.update_item(
            Key={"pk": _pk(run_id), "sk": "STATE"}, UpdateExpression=expression.strip(), **kwargs
        )

    # --- tool call claims -----------------------------------------------------------------

    def claim_call(self, run_id: str, seq: int, lease_seconds: int) -> bool:
        """Take the call for this delivery; False if another live delivery holds it.

        Keyed by the call's history slot, not the model's call id: some OpenAI-compatible
        servers reuse ids such as `call_0` on every turn.
        """
        now = int(time.time())
        try:
            self._table.put_item(
                Item={"pk": _pk(run_id), "sk": f"CALL#{seq:06d}", "lease_until": now + lease_seconds},
                ConditionExpression="attribute_not_exists(pk) OR lease_until < :now",
                ExpressionAttributeValues={":now": now},
            )
        except ClientError as e:
            if _is_conditional_failure(e):
                return False
            raise
        return True

    def release_call(self, run_id: str, seq: int) -> None:
        self._table.delete_item(Key={"pk": _pk(run_id), "sk": f"CALL#{seq:06d}"})

    # --- reading a run page by page (the runs API) -----------------------------------------

    def iter_history(self, run_id: str, after: int = 0) -> Iterator[HistoryItem]:
        """The items after `after`, in order, each read (from S3 too) only when the caller
        asks for it: a page stops early without loading what it will not show."""
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :first AND :last",
            "ExpressionAttributeValues": {
                ":pk": _pk(run_id),
                ":first": _msg_sk(after + 1),
                ":last": _msg_sk(999_999),
            },
            "ConsistentRead": True,
            "Limit": 100,
        }
        while True:
            page = self._table.query(**kwargs)
            for row in page.get("Items", []):
                yield self._load(row)
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def stored_message_key(self, run_id: str, seq: int) -> str | None:
        """The S3 key of an item too large for DynamoDB; None if it is stored inline or absent."""
        row = self._table.get_item(
            Key={"pk": _pk(run_id), "sk": _msg_sk(seq)}, ProjectionExpression="data_ref", ConsistentRead=True
        ).get("Item")
        return None if row is None or "data_ref" not in row else str(row["data_ref"])


def _plain(value: Any) -> Any:
    """DynamoDB numbers come back as Decimal, at any depth (the run's parent link is a map)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
