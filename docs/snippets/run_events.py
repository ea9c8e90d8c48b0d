import json

from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.infra.local.scripted_model import DemoResponder, ScriptedModelServer

with (
    ScriptedModelServer(DemoResponder()) as model,
    LocalRuntime(extra_env={"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "scripted"}) as runtime,
):
    queue = runtime.sqs.create_queue(QueueName="my-run-events")["QueueUrl"]
    queue_arn = runtime.sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    runtime.events.put_rule(
        Name="all-runs",
        EventBusName=runtime.event_bus_name,
        # The run events this reads, by name (`{"source": ["toolpipe"]}` alone is every run
        # event; requests to start runs come from sources of their own).
        EventPattern=json.dumps(
            {
                "source": ["toolpipe"],
                "detail-type": [
                    "RunStarted",
                    "ToolCallCompleted",
                    "RunCompleted",
                    "RunFailed",
                    "RunCancelled",
                ],
            }
        ),
    )
    runtime.events.put_targets(
        Rule="all-runs",
        EventBusName=runtime.event_bus_name,
        Targets=[{"Id": "mine", "Arn": queue_arn["Attributes"]["QueueArn"]}],
    )
    status, started = runtime.api("POST", "/runs", {"input": "What is 2+3?", "agent": "assistant"})
    runtime.wait_for_execution(started["run_id"])
    received = runtime.sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    for message in received:
        event = json.loads(message["Body"])
        print(event["detail-type"], event["detail"].get("tool") or event["detail"]["status"])
# RunStarted running
# ToolCallCompleted sum
# RunCompleted succeeded
