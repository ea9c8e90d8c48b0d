"""Approval records on the run table (`shared/history/store.py`'s table).

Keys: `pk=APPROVAL#<id>, sk=APPROVAL` (the record, listed by requester through the `ByCaller`
index under `APPROVALS#<requester>`), `pk=APPROVAL#<id>, sk=TOKEN` (the task token: no view
reads this item) and, in the run's partition, `pk=RUN#<run>, sk=GATE#<seq>` (the call's gate
beside the tool ledger). Decisions are conditional writes on `status = pending`: the first one
wins and the ones after change nothing. All three expire with their run
(`shared/history/retention.py`), which finds the first two from the gate's `approval_id`.
"""

import builtins
import json
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from toolpipe.shared.deferred.models import (
    Approval,
    ApprovalAlreadyDecidedError,
    ApprovalNotFoundError,
    ApprovalStatus,
    EditedArguments,
    Gate,
)
from toolpipe.shared.dynamo import (
    APPROVALS_OF_CALLER,
    CALLER_INDEX,
    CALLER_INDEX_PK,
    CALLER_INDEX_SK,
    GATE_PREFIX,
    approval_pk,
    gate_sk,
    lost_race,
    run_pk,
)
from toolpipe.shared.history import retention
from toolpipe.shared.messages import utc_now

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

RECORD_SK = "APPROVAL"
TOKEN_SK = "TOKEN"
# A listing answers at most this many approvals (newest first): an inbox, not an archive.
LIST_LIMIT = 100


def _gate_key(run_id: str, seq: int) -> dict[str, str]:
    return {"pk": run_pk(run_id), "sk": gate_sk(seq)}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    return {k: int(v) if k in ("seq", "message_seq", "turn") else v for k, v in item.items()}


class DynamoApprovalStore:
    def __init__(self, table: "Table") -> None:
        self._table = table

    def create(self, approval: Approval, token: str) -> Approval:
        """Store a new approval for its call, or, when the call has one (the waiting task was
        started again, with a new token), keep that one and give it the new token while it is
        pending. Returns the call's approval."""
        record = {
            "pk": approval_pk(approval.approval_id),
            "sk": RECORD_SK,
            **approval.model_dump(exclude_none=True),
        }
        if approval.result_schema is not None:
            # As JSON text: DynamoDB takes no floats, and a schema may hold some (`"minimum": 0.5`).
            record["result_schema"] = json.dumps(approval.result_schema)
        if approval.requester is not None:
            record[CALLER_INDEX_PK] = f"{APPROVALS_OF_CALLER}{approval.requester}"
            record[CALLER_INDEX_SK] = f"{approval.created_at}#{approval.approval_id}"
        gate = {
            **_gate_key(approval.run_id, approval.seq),
            "approval_id": approval.approval_id,
            "arguments_sha256": approval.arguments_sha256,
            "status": approval.status.value,
        }
        if approval.tool_sha256 is not None:
            gate["tool_sha256"] = approval.tool_sha256
        name = self._table.name
        try:
            self._table.meta.client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": name,
                            "Item": gate,
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {
                        "Put": {
                            "TableName": name,
                            "Item": record,
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {"Put": {"TableName": name, "Item": self._token_item(approval.approval_id, token)}},
                ]
            )
            self._stamp_if_ended(approval.run_id, approval.seq, approval.approval_id)
            return approval
        except ClientError as e:
            if not lost_race(e):
                raise
        existing = self.get_gate(approval.run_id, approval.seq)
        if existing is None:
            raise RuntimeError(
                f"approval of call {approval.seq} of run {approval.run_id} could not be stored"
            )
        try:
            self._table.meta.client.transact_write_items(
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": name,
                            "Key": {"pk": approval_pk(existing.approval_id), "sk": RECORD_SK},
                            "ConditionExpression": "#status = :pending",
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": {":pending": ApprovalStatus.PENDING.value},
                        }
                    },
                    {"Put": {"TableName": name, "Item": self._token_item(existing.approval_id, token)}},
                ]
            )
        except ClientError as e:
            if not lost_race(e):
                raise
        self._stamp_if_ended(approval.run_id, approval.seq, existing.approval_id)  # the token was put anew
        return self.get(existing.approval_id)

    def _stamp_if_ended(self, run_id: str, seq: int, approval_id: str) -> None:
        """A step racing a cancel may store an approval after its run ended, which the ending's
        stamping missed: these items then expire with the run (shared/history/retention.py)."""
        _, until = retention.ended_stamp(self._table, run_id)
        if until is not None:
            keys = [{"pk": approval_pk(approval_id), "sk": sk} for sk in (RECORD_SK, TOKEN_SK)]
            retention.stamp(self._table, [*keys, _gate_key(run_id, seq)], until)

    @staticmethod
    def _token_item(approval_id: str, token: str) -> dict[str, Any]:
        # Its own item: the record is what views read, and a token is a bearer credential.
        return {"pk": approval_pk(approval_id), "sk": TOKEN_SK, "token": token}

    def get(self, approval_id: str) -> Approval:
        item = self._table.get_item(
            Key={"pk": approval_pk(approval_id), "sk": RECORD_SK}, ConsistentRead=True
        ).get("Item")
        if item is None:
            raise ApprovalNotFoundError(approval_id)
        return self._approval(item)

    @staticmethod
    def _approval(item: dict[str, Any]) -> Approval:
        fields = {k: v for k, v in item.items() if k in Approval.model_fields}
        if isinstance(fields.get("result_schema"), str):
            fields["result_schema"] = json.loads(fields["result_schema"])
        return Approval.model_validate(_plain(fields))

    def get_token(self, approval_id: str) -> str | None:
        item = self._table.get_item(
            Key={"pk": approval_pk(approval_id), "sk": TOKEN_SK}, ConsistentRead=True
        ).get("Item")
        return None if item is None else str(item["token"])

    def get_gate(self, run_id: str, seq: int) -> Gate | None:
        item = self._table.get_item(Key=_gate_key(run_id, seq), ConsistentRead=True).get("Item")
        if item is None:
            return None
        return Gate.from_item(item)

    def reopen(self, approval: Approval) -> Approval:
        """Back to pending from its current status: see `decide` for what is dropped."""
        return self.decide(approval, ApprovalStatus.PENDING, None, from_status=approval.status)

    def decide(
        self,
        approval: Approval,
        status: ApprovalStatus,
        by: str | None,
        reason: str | None = None,
        from_status: ApprovalStatus = ApprovalStatus.PENDING,
        arguments: EditedArguments | None = None,
        answer: str | None = None,
    ) -> Approval:
        """Move an approval from `from_status` (pending) to `status`, with its gate, in one
        transaction; raises `ApprovalAlreadyDecidedError` (nothing written) when it is no
        longer in `from_status`. `arguments`: approved with these instead of the model's (record
        and gate). A decision taken back (to pending) drops edited arguments again."""
        values: dict[str, Any] = {":status": status.value, ":pending": from_status.value}
        names = {"#status": "status"}
        sets = ["#status = :status"]
        removes: list[str] = []
        gate_sets = ["#status = :status"]
        gate_values: dict[str, Any] = {":status": status.value}
        gate_removes: list[str] = []
        if status is ApprovalStatus.PENDING:
            # Taken back: nothing of the decision stays (who, when, why, what it answered, the
            # edited arguments), and the next decision starts from the model's arguments again.
            names["#reason"] = "reason"
            removes += ["decided_by", "decided_at", "#reason", "answer_preview", "delivery_uncertain"]
            if approval.requested_arguments_sha256 is not None:
                values[":sha"] = gate_values[":sha"] = approval.requested_arguments_sha256
                sets.append("arguments_sha256 = :sha")
                gate_sets.append("arguments_sha256 = :sha")
            removes += ["arguments", "requested_arguments_sha256"]
            gate_removes.append("arguments")
        else:
            values[":at"] = utc_now()
            sets.append("decided_at = :at")
        if by is not None:
            values[":by"] = by
            sets.append("decided_by = :by")
        if reason is not None:
            names["#reason"] = "reason"
            values[":reason"] = reason
            sets.append("#reason = :reason")
        if answer is not None:
            values[":answer"] = answer
            sets.append("answer_preview = :answer")
        if arguments is not None:
            values |= {":args": arguments.text, ":sha": arguments.sha256, ":asked": approval.arguments_sha256}
            sets += ["arguments = :args", "arguments_sha256 = :sha", "requested_arguments_sha256 = :asked"]
            gate_values |= {":args": arguments.text, ":sha": arguments.sha256}
            gate_sets += ["arguments = :args", "arguments_sha256 = :sha"]
        record_update = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        gate_update = (
            "SET " + ", ".join(gate_sets) + (" REMOVE " + ", ".join(gate_removes) if gate_removes else "")
        )
        name = self._table.name
        try:
            self._table.meta.client.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": name,
                            "Key": {"pk": approval_pk(approval.approval_id), "sk": RECORD_SK},
                            "UpdateExpression": record_update,
                            "ConditionExpression": "#status = :pending",
                            "ExpressionAttributeNames": names,
                            "ExpressionAttributeValues": values,
                        }
                    },
                    {
                        "Update": {
                            "TableName": name,
                            "Key": _gate_key(approval.run_id, approval.seq),
                            "UpdateExpression": gate_update,
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": gate_values,
                        }
                    },
                ]
            )
        except ClientError as e:
            if not lost_race(e):
                raise
            raise ApprovalAlreadyDecidedError(
                approval.approval_id, self.get(approval.approval_id).status
            ) from e
        return self.get(approval.approval_id)

    def set_delivery_uncertain(self, approval_id: str, uncertain: bool) -> None:
        key = {"pk": approval_pk(approval_id), "sk": RECORD_SK}
        if uncertain:
            self._table.update_item(
                Key=key,
                UpdateExpression="SET delivery_uncertain = :t",
                ExpressionAttributeValues={":t": True},
            )
        else:
            self._table.update_item(Key=key, UpdateExpression="REMOVE delivery_uncertain")

    def list(self, requester: str | None, status: ApprovalStatus | None) -> list[Approval]:
        """`requester`'s approvals, newest first (None: everyone's, in no set order)."""
        values: dict[str, Any] = {}
        kwargs: dict[str, Any] = {}
        if status is not None:
            kwargs["FilterExpression"] = "#status = :status"
            kwargs["ExpressionAttributeNames"] = {"#status": "status"}
            values[":status"] = status.value
        keys: list[dict[str, Any]] = []
        if requester is None:
            kwargs["FilterExpression"] = " AND ".join(
                filter(None, ["sk = :record", kwargs.get("FilterExpression")])
            )
            values[":record"] = RECORD_SK
            operation: Any = self._table.scan
        else:
            kwargs |= {
                "IndexName": CALLER_INDEX,
                "KeyConditionExpression": f"{CALLER_INDEX_PK} = :requester",
                "ScanIndexForward": False,
            }
            values[":requester"] = f"{APPROVALS_OF_CALLER}{requester}"
            operation = self._table.query
        kwargs["ExpressionAttributeValues"] = values
        while len(keys) < LIST_LIMIT:
            page = operation(**kwargs)
            keys.extend({"pk": item["pk"], "sk": RECORD_SK} for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        found = [self.get(str(key["pk"]).removeprefix("APPROVAL#")) for key in keys[:LIST_LIMIT]]
        if requester is None:
            found.sort(key=lambda a: a.created_at, reverse=True)
        return found

    def for_run(self, run_id: str, limit: int) -> "builtins.list[Approval]":
        """The approvals of the run's calls, found from their gates in the run's partition."""
        return self._gated(run_id, limit, pending=False)

    def waiting(self, run_id: str) -> "builtins.list[Approval]":
        """The run's calls that wait now (their gates pending), in slot order."""
        return self._gated(run_id, LIST_LIMIT, pending=True)

    def _gated(self, run_id: str, limit: int, pending: bool) -> "builtins.list[Approval]":
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :gate)",
            "ExpressionAttributeValues": {":pk": run_pk(run_id), ":gate": GATE_PREFIX},
            "ProjectionExpression": "approval_id",
        }
        if pending:
            kwargs["FilterExpression"] = "#status = :pending"
            kwargs["ExpressionAttributeNames"] = {"#status": "status"}
            kwargs["ExpressionAttributeValues"][":pending"] = ApprovalStatus.PENDING.value
        ids: list[str] = []
        while len(ids) < limit:
            page = self._table.query(**kwargs)
            ids.extend(str(item["approval_id"]) for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        found = []
        for approval_id in ids[:limit]:
            try:
                found.append(self.get(approval_id))
            except ApprovalNotFoundError:
                continue  # its run is being deleted: the gate goes last
        return found
