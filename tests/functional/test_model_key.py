"""The model key's secret as the stack makes it (issue 10, item 3): created empty, every run fails
with the command that sets it; once set, the next run works with nothing restarted; a replaced
key is picked up at its first 401."""

import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from toolpipe.infra.cdk.functions import ORCHESTRATOR
from toolpipe.infra.local.isolation import FunctionContext, running_as
from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.infra.local.scripted_model import DemoResponder, ScriptedModelServer

PROMPT = "What is 2+3?"  # the demo model answers it with one sum call


@dataclass
class Deployed:
    runtime: LocalRuntime
    model: ScriptedModelServer
    secret_arn: str

    def run(self) -> dict[str, Any]:
        status, body = self.runtime.api("POST", "/runs", {"input": PROMPT, "agent": "assistant"})
        assert status == 202, body
        self.runtime.wait_for_execution(body["run_id"])
        status, view = self.runtime.api("GET", f"/runs/{body['run_id']}")
        assert status == 200, view
        return dict(view["run"])

    def put_key(self, key: str) -> None:
        boto3.client("secretsmanager").put_secret_value(SecretId=self.secret_arn, SecretString=key)


@pytest.fixture
def deployed() -> Iterator[Deployed]:
    """The orchestrator configured as the stack configures it: the key's secret ARN, no key."""
    with (
        ScriptedModelServer(DemoResponder(), api_key="sk-right") as model,
        LocalRuntime(extra_env={"OPENAI_BASE_URL": model.base_url}) as runtime,
    ):
        # As the stack creates it: a secret with no value at all (no generated one). Locally the
        # orchestrator reads the developer's key; here it reads the secret, as deployed.
        arn = runtime.deployment.model_key_arn
        assert arn is not None
        orchestrator = runtime.functions[ORCHESTRATOR.name]
        orchestrator.environment["OPENAI_API_KEY_SECRET_ARN"] = arn
        _cold_start(orchestrator)  # the function's, with its configuration as deployed
        yield Deployed(runtime, model, arn)
        runtime.drain(timeout=10)
        del orchestrator.environment["OPENAI_API_KEY_SECRET_ARN"]
        _cold_start(orchestrator)  # no later test sees this secret's ARN


def _cold_start(function: FunctionContext) -> None:
    # Settings are read at import; a module not imported yet reads them at its first call.
    if ORCHESTRATOR.module in sys.modules:
        with running_as(function):
            importlib.reload(sys.modules[ORCHESTRATOR.module])


def test_a_run_fails_with_the_command_that_sets_the_key_then_works_once_it_is_set(deployed: Deployed) -> None:
    failed = deployed.run()
    assert failed["status"] == "failed"
    assert failed["error"] == (
        "ModelKeyNotSetError: the model API key is not set: put it with `aws secretsmanager "
        f"put-secret-value --secret-id {deployed.secret_arn} --secret-string YOUR_KEY`"
    )
    # Never sent to the provider (no 401 from it), and not retried: the model step ran once.
    assert deployed.model.requests == [] and deployed.model.refused_keys == 0
    scheduled = [
        e for e in deployed.runtime.execution_events(failed["run_id"]) if e["type"] == "TaskScheduled"
    ]
    assert len(scheduled) == 2  # CallModel once, then MarkFailed

    deployed.put_key("sk-right")
    # Nothing restarted or redeployed: the same warm orchestrator reads the key now.
    worked = deployed.run()
    assert worked["status"] == "succeeded", worked["error"]
    assert worked["output"] and "5" in worked["output"]
    assert deployed.model.refused_keys == 0


def test_a_key_replaced_at_the_provider_is_read_again_at_the_first_401(deployed: Deployed) -> None:
    deployed.put_key("sk-right")
    assert deployed.run()["status"] == "succeeded"  # the key is now cached for minutes
    deployed.model.api_key = "sk-rotated"  # the provider revoked the old key...
    deployed.put_key("sk-rotated")  # ...and the user put the new one
    rotated = deployed.run()
    assert rotated["status"] == "succeeded", rotated["error"]
    assert deployed.model.refused_keys == 1  # one 401, then the fresh key


def test_a_wrong_key_fails_the_run_naming_the_secret_it_came_from(deployed: Deployed) -> None:
    deployed.put_key("sk-wrong")
    failed = deployed.run()
    assert failed["status"] == "failed"
    assert failed["error"].startswith("ModelRejectedError: model endpoint refused the request: 401")
    assert failed["error"].endswith(f"(the key in secret {deployed.secret_arn})")
    assert deployed.model.refused_keys == 1  # re-read after the 401, the same key is not sent again
