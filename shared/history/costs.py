"""The operations a run made (shared/costs), on the run table: one `COST` item of counters per
run, created with the run (`run_records.create_run`) and only ever added to, by `ADD`, so
invocations that end at once never lose a count. It lives and expires with the run's partition.
Keys: `shared/dynamo.py`.
"""

from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from toolpipe.shared.costs.operations import Operations
from toolpipe.shared.dynamo import COST_SK, counted_execution_sk, lost_race, run_pk
from toolpipe.shared.history.table import RunTable


def cost_item(run_id: str) -> dict[str, Any]:
    """The empty counters a run starts with (in the transaction that creates it)."""
    return {"pk": run_pk(run_id), "sk": COST_SK}


def _add_expression(ops: Operations) -> dict[str, Any]:
    counters = ops.counters()
    names = {f"#c{i}": name for i, name in enumerate(counters)}
    values = {f":c{i}": Decimal(str(value)) for i, value in enumerate(counters.values())}
    return {
        "UpdateExpression": "ADD " + ", ".join(f"#c{i} :c{i}" for i in range(len(counters))),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


class RunCostStore(RunTable):
    def add_costs(self, run_id: str, ops: Operations) -> bool:
        if ops.is_empty():
            return True
        try:
            self._table.update_item(
                Key={"pk": run_pk(run_id), "sk": COST_SK},
                # The run is gone (deleted): its counters must not come back as an item no
                # expiry or delete would ever find.
                ConditionExpression="attribute_exists(pk)",
                **_add_expression(ops),
            )
        except ClientError as e:
            if lost_race(e):
                return False
            raise
        return True

    def get_costs(self, run_id: str) -> Operations:
        item = self._table.get_item(Key={"pk": run_pk(run_id), "sk": COST_SK}).get("Item") or {}
        return Operations.from_counters(item)

    def count_execution(self, run_id: str, execution: str, transitions: int) -> bool:
        """Add an ended execution's state transitions, once per execution: a repeated ending
        event changes nothing (False). The marker and the counters are one transaction."""
        pk = run_pk(run_id)
        add = _add_expression(Operations(state_transitions=transitions))
        client: Any = self._table.meta.client  # plain Python values, as the table resource takes them
        try:
            client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._table.name,
                            "Item": {
                                "pk": pk,
                                "sk": counted_execution_sk(execution),
                                "transitions": transitions,
                            },
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {
                        "Update": {
                            "TableName": self._table.name,
                            "Key": {"pk": pk, "sk": COST_SK},
                            "ConditionExpression": "attribute_exists(pk)",
                            **add,
                        }
                    },
                ]
            )
        except ClientError as e:
            if lost_race(e):
                return False
            raise
        # The ending event comes after the run's end stamped its items: the marker is stamped
        # by its writer, as anything written into an ended run is (retention.after_write).
        self._after_write(run_id, [{"pk": pk, "sk": counted_execution_sk(execution)}], [])
        return True
