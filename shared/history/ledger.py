"""The tool-call ledger on the run table: a call is CLAIMED by one delivery, then DONE in the
same transaction that stores its result (`sk=CALL#<seq>`, keyed by history slot); the state tools
share within a run (`sk=STATE`); and the one read a call's delivery starts with.
"""

import json
import time
import uuid
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from toolpipe.shared.dynamo import META_SK, STATE_SK, call_sk, gate_sk, lost_race, message_sk, plain, run_pk
from toolpipe.shared.history.errors import RunNotFoundError
from toolpipe.shared.history.ports import CallRead, Claim, ClaimState
from toolpipe.shared.history.table import RunTable, objects_of
from toolpipe.shared.messages import ToolResult


class CallLedgerStore(RunTable):
    """`CallLedger`, `CallReads` and `SharedStates` on the run table."""

    def load_call(self, run_id: str, reply_seq: int, seq: int) -> CallRead:
        # One request for what three reads fetched: a tool call's delivery starts with these.
        wanted: dict[str, dict[str, Any] | None] = {
            META_SK: None,
            message_sk(reply_seq): None,
            message_sk(seq): None,
            # The approval gate of a call that needed one: the worker checks what was approved.
            gate_sk(seq): None,
        }
        keys: list[dict[str, Any]] = [{"pk": run_pk(run_id), "sk": sk} for sk in wanted]
        # The table resource's client takes and gives plain Python values (boto3's transformer).
        client: Any = self._table.meta.client
        for delay in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, None):
            answer = client.batch_get_item(
                RequestItems={self._table.name: {"Keys": keys, "ConsistentRead": True}}
            )
            for row in answer["Responses"].get(self._table.name, []):
                wanted[str(row["sk"])] = row
            keys = answer.get("UnprocessedKeys", {}).get(self._table.name, {}).get("Keys", [])
            if not keys:
                break
            if delay is None:  # throttled past every retry: as any other read that fails
                raise RuntimeError(f"DynamoDB left {len(keys)} keys of run {run_id} unread")
            time.sleep(delay)
        meta = wanted["META"]
        if meta is None:
            raise RunNotFoundError(run_id)
        reply, result = wanted[message_sk(reply_seq)], wanted[message_sk(seq)]
        return CallRead(
            run=self._record(run_id, meta),
            reply=None if reply is None else self._load(reply),
            result=None if result is None else self._load(result),
            gate=wanted[gate_sk(seq)],
        )

    def load_state(self, run_id: str) -> dict[str, Any]:
        row = self._table.get_item(Key={"pk": run_pk(run_id), "sk": STATE_SK}, ConsistentRead=True).get(
            "Item", {}
        )
        return {name[2:]: json.loads(str(value)) for name, value in row.items() if name.startswith("s_")}

    @staticmethod
    def _state_update(changed: dict[str, Any], removed: list[str]) -> dict[str, Any]:
        """One attribute per key, values as JSON text: parallel calls writing different keys
        do not overwrite each other, and numbers keep their type (no Decimal)."""
        names = {f"#k{i}": f"s_{key}" for i, key in enumerate(changed)}
        names |= {f"#r{i}": f"s_{key}" for i, key in enumerate(removed)}
        expression = ""
        if changed:
            expression += "SET " + ", ".join(f"#k{i} = :v{i}" for i in range(len(changed)))
        if removed:
            expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removed)))
        update: dict[str, Any] = {"UpdateExpression": expression.strip(), "ExpressionAttributeNames": names}
        if changed:
            update["ExpressionAttributeValues"] = {
                f":v{i}": json.dumps(value) for i, value in enumerate(changed.values())
            }
        return update

    # --- the tool-call ledger: CLAIMED -> DONE, keyed by history slot ------------------------

    def claim_call(self, run_id: str, seq: int, lease_seconds: int) -> Claim:
        """Claim the call for this delivery (see `CallLedger`).

        Keyed by the call's history slot, never the model's call id: models and compatible
        servers repeat, reuse and omit ids.
        """
        key = {"pk": run_pk(run_id), "sk": call_sk(seq)}
        owner, now = uuid.uuid4().hex, time.time()
        try:
            self._table.put_item(
                Item={
                    **key,
                    "state": "CLAIMED",
                    "owner": owner,
                    "lease_until": Decimal(str(now + lease_seconds)),
                    "attempt": 1,
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
            return Claim(ClaimState.NEW, owner, 1)
        except ClientError as e:
            if not lost_race(e):
                raise
        row = self._table.get_item(Key=key, ConsistentRead=True).get("Item", {})
        if row.get("state") == "DONE":
            return Claim(ClaimState.DONE)
        if float(plain(row.get("lease_until", 0))) >= now:
            return Claim(ClaimState.BUSY)
        attempt = int(plain(row.get("attempt", 1))) + 1
        try:
            # Conditional on the claim we read: two redeliveries cannot both take it over.
            self._table.update_item(
                Key=key,
                UpdateExpression="SET #owner = :owner, lease_until = :lease, attempt = :attempt",
                ConditionExpression="#owner = :previous AND #state = :claimed",
                ExpressionAttributeNames={"#owner": "owner", "#state": "state"},
                ExpressionAttributeValues={
                    ":owner": owner,
                    ":lease": Decimal(str(now + lease_seconds)),
                    ":attempt": attempt,
                    ":previous": row.get("owner", ""),
                    ":claimed": "CLAIMED",
                },
            )
        except ClientError as e:
            if lost_race(e):
                return Claim(ClaimState.BUSY)
            raise
        return Claim(ClaimState.TAKEN_OVER, owner, attempt)

    def complete_call(
        self,
        run_id: str,
        result: ToolResult,
        owner: str,
        state_changes: tuple[dict[str, Any], list[str]] = ({}, []),
    ) -> bool:
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._table.name,
                    "Item": self._message_item(run_id, result),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Update": {
                    "TableName": self._table.name,
                    "Key": {"pk": run_pk(run_id), "sk": call_sk(result.seq)},
                    "UpdateExpression": "SET #state = :done",
                    "ConditionExpression": "#owner = :owner",
                    "ExpressionAttributeNames": {"#state": "state", "#owner": "owner"},
                    "ExpressionAttributeValues": {":done": "DONE", ":owner": owner},
                }
            },
        ]
        changed, removed = state_changes
        if changed or removed:
            items.append(
                {
                    "Update": {
                        "TableName": self._table.name,
                        "Key": {"pk": run_pk(run_id), "sk": STATE_SK},
                        **self._state_update(changed, removed),
                    }
                }
            )
        try:
            self._table.meta.client.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        except ClientError as e:
            if lost_race(e):
                return False
            raise
        # A call still running when its run was cancelled stores its result after the ending.
        row = items[0]["Put"]["Item"]
        keys = [{"pk": run_pk(run_id), "sk": sk} for sk in (row["sk"], call_sk(result.seq), "STATE")]
        self._after_write(run_id, keys, objects_of(row))
        return True

    def release_call(self, run_id: str, seq: int, owner: str) -> None:
        try:
            self._table.delete_item(
                Key={"pk": run_pk(run_id), "sk": call_sk(seq)},
                ConditionExpression="#owner = :owner AND #state = :claimed",
                ExpressionAttributeNames={"#owner": "owner", "#state": "state"},
                ExpressionAttributeValues={":owner": owner, ":claimed": "CLAIMED"},
            )
        except ClientError as e:
            if not lost_race(e):
                raise
