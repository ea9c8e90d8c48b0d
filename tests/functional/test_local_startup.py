"""A process's later runtimes start without making their own AWS clients again (issue 31): the
runtime calls through clients kept per process (infra/local/clients.py), hands out clients of
each runtime's own, and a later runtime is the same deployment as the first, with none of its
data."""

import re
from typing import Any

import botocore.session
import pytest

from toolpipe.infra.local.runtime import TABLE, LocalRuntime
from toolpipe.testing import LocalPipeline, Reply


def _counting_clients(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    create = botocore.session.Session.create_client

    def counting(self: botocore.session.Session, service_name: str, *args: Any, **kwargs: Any) -> Any:
        made.append(service_name)
        return create(self, service_name, *args, **kwargs)

    monkeypatch.setattr(botocore.session.Session, "create_client", counting)
    return made


def test_a_later_runtime_in_the_process_makes_no_client_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    with LocalRuntime(workers=0):
        pass  # the process's first makes the runtime's clients
    made = _counting_clients(monkeypatch)
    with LocalRuntime(workers=0) as runtime:
        assert made == []  # each start made nine (~55 ms of ~125 ms of CPU)
        runtime.sqs.list_queues()
        assert made == ["sqs"]  # the one it hands out is its own, made when asked for
    # Other AWS settings: clients of their own (a client reads them when it is made).
    with LocalRuntime(workers=0, extra_env={"AWS_MAX_ATTEMPTS": "2"}):
        assert "dynamodb" in made


def test_what_a_test_registers_on_a_runtimes_client_stays_with_that_runtime() -> None:
    seen: list[str] = []

    def count(**kwargs: Any) -> None:
        seen.append(kwargs["event_name"])

    with LocalRuntime(workers=0) as first:
        first.sqs.meta.events.register("before-call.sqs", count)  # left registered
        first.sqs.list_queues()
        assert seen == ["before-call.sqs.ListQueues"]
    with LocalRuntime(workers=1) as second:  # deploys queues, and a worker polls one
        assert second.sqs is not first.sqs
        second.sqs.get_queue_url(QueueName="toolpipe-local-tools")
    assert seen == ["before-call.sqs.ListQueues"]


def _everything(runtime: LocalRuntime) -> dict[str, Any]:
    """What a runtime's services hold: runs, items, objects, messages, executions."""
    buckets = [b["Name"] for b in runtime.s3.list_buckets()["Buckets"]]
    queues = runtime.sqs.list_queues()["QueueUrls"]
    return {
        "runs": runtime.api("GET", "/runs")[1]["runs"],
        "items": runtime.dynamodb.scan(TableName=TABLE)["Items"],
        "objects": {b: runtime.s3.list_objects_v2(Bucket=b).get("Contents", []) for b in buckets},
        "messages": {
            q: runtime.sqs.get_queue_attributes(QueueUrl=q, AttributeNames=["All"])["Attributes"][
                "ApproximateNumberOfMessages"
            ]
            for q in queues
        },
        "executions": runtime.sfn.list_executions(stateMachineArn=runtime.state_machine_arn)["executions"],
        "emails": runtime.ses.get_send_quota()["SentLast24Hours"],
    }


def _deployed(runtime: LocalRuntime) -> str:
    """The runtime's resources, names and ARNs, and each function's environment and role, as
    text: a secret's ARN ends in six random characters at every creation, as on AWS, and the
    model's address is each pipeline's own server."""
    functions = {
        name: ({k: v for k, v in c.environment.items() if k != "OPENAI_BASE_URL"}, repr(c.policy))
        for name, c in runtime.functions.items()
    }
    d = runtime.deployment
    text = repr(
        (sorted(d.refs.items()), sorted(d.attributes.items()), d.definition, sorted(functions.items()))
    )
    return re.sub(r"(:secret:[\w-]+)-\w{6}\b", r"\1-XXXXXX", text)


def test_a_later_runtime_is_the_same_deployment_with_nothing_of_the_first() -> None:
    with LocalPipeline() as pipeline:
        first = pipeline.runtime
        empty = _everything(first)
        pipeline.script(Reply(content="first"))
        assert pipeline.run("remember this").output == "first"
        assert _everything(first) != empty
        deployed = _deployed(first)
    assert ":secret:toolpipe-local-approval-signing-key-XXXXXX" in deployed
    with LocalPipeline() as pipeline:
        assert _deployed(pipeline.runtime) == deployed
        assert _everything(pipeline.runtime) == empty
