"""The embedded default: the whole pipeline on one machine, with no AWS account and no Docker.

moto stands in for DynamoDB, S3, SQS, Lambda and Step Functions (its interpreter switched
on, so the state machine definition the stack ships really executes); our handlers run
in-process; a pool of local workers consumes the tool queue in parallel; API calls go to
the real API handler as API Gateway proxy events.
"""

import contextlib
import functools
import gc
import importlib
import json
import os
import sys
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from toolpipe.shared import collector

# Imported with the collector paused, then frozen: what this imports (moto, boto3, the stack's
# definitions) lasts the process, and the collector's passes during the import only walked it
# (~100 ms of a 520 ms import: two full passes). A runtime's stop gives it back (`gc.unfreeze`).
# A full pass first, so that the importer's garbage in cycles is freed, not frozen (in a fresh
# process, ~5 ms); the import's own is frozen with it: ~1,000 objects.
with collector.paused(keep=True, collect=True):
    import boto3
    from moto import mock_aws
    from moto.core.config import default_user_config

    from toolpipe.infra.cdk import limits
    from toolpipe.infra.cdk.definition import (
        MAX_PARALLEL_CALLS,
        execution_ended_pattern,
        execution_ended_request,
        matches,
    )
    from toolpipe.infra.cdk.functions import API, FUNCTIONS, ORCHESTRATOR, TOOL_RUNNER, TOOL_WORKER, TRIGGERS
    from toolpipe.infra.local import (
        clients,
        control_flow_logs,
        deployment,
        execution_events,
        function_env,
        iam,
        isolation,
        lambdas,
        logfile,
        patches,
        persistence,
        recovery,
        s3_links,
        serial,
        stopped_calls,
        template,
        triggers,
    )
    from toolpipe.infra.local.client import LOCAL_CALLER as LOCAL_CALLER  # where it is named (moto-free)
    from toolpipe.infra.local.tool_processes import ToolProcesses
    from toolpipe.infra.local.workers import WorkerPool
    from toolpipe.shared.aws_clients import AwsClients
    from toolpipe.shared.history.store import DynamoHistoryStore
    from toolpipe.shared.runs.executions import execution_name
    from toolpipe.shared.runs.factory import build_events
    from toolpipe.shared.runs.ports import StepFunctionsStarter, StepFunctionsTaskReporter
    from toolpipe.shared.settings import EventSettings
    from toolpipe.shared.triggers.events import RUN_REQUESTED_DETAIL_TYPE

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_sqs.client import SQSClient

REGION = deployment.REGION
# The history table's keys and indexes, as the stack defines them (from the packaged template):
# `create_table(TableName=..., **HISTORY_TABLE)`.
_PACKAGED = template.load(template.PACKAGED)
HISTORY_TABLE: dict[str, Any] = deployment.table_definition(
    _PACKAGED.properties(deployment.history_table_id(_PACKAGED))
)
TABLE = "toolpipe-local"
BUCKET = "toolpipe-local-contents"
# The stack's own bus for run events (shared/runs/events.py); subscribe with a rule on it.
EVENT_BUS = "toolpipe-local-events"
# The address the example's `send_email` sends from (TOOLPIPE_EMAIL_SENDER): verified in moto's
# SES with its domain, which keeps what is sent (`ses.get_send_quota()`, moto's `sent_messages`).
EMAIL_SENDER = "assistant@example.com"
# The secret holding the approval links' HMAC key (README "The approval link").
SIGNING_KEY_SECRET = "toolpipe-local-approval-signing-key"
# Local names of the template's resources, by what they are to the runtime (the rest get
# `toolpipe-local-<logical id>`).
LOCAL_NAMES = {
    "table": TABLE,
    "bucket": BUCKET,
    "trigger_bucket": triggers.TRIGGER_BUCKET,
    "bus": EVENT_BUS,
    "signing_key": SIGNING_KEY_SECRET,
    "model_key": "toolpipe-local-model-key",
    "tool_queue": "toolpipe-local-tools",
    "tool_dlq": "toolpipe-local-tool-dlq",
    "state_machine": "toolpipe-local",
    **{f"function:{name}": f"toolpipe-local-{name}" for name in FUNCTIONS},
}


class LocalRuntime:
    """`with LocalRuntime() as rt:` the stack's resources in moto, workers running.

    `state_dir`, when given, keeps the table and the content bucket between processes, kill -9
    included (`infra/local/persistence.py`), and at start every run still recorded running goes
    on in a fresh execution, or ends saying why (`resume`, by default when there are workers).
    """

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        workers: int = MAX_PARALLEL_CALLS,  # one per branch the Map runs at once
        visibility_timeout: int = limits.QUEUE_VISIBILITY_SECONDS,
        extra_env: dict[str, str] | None = None,
        resume: bool | None = None,
        template_path: Path | None = None,
    ) -> None:
        self._state_dir = state_dir
        self._worker_count = workers
        self._visibility = visibility_timeout
        self._extra_env = extra_env or {}
        # The synthesized template the runtime is built from (infra/local/template.py).
        self._template_path = template_path or template.configured_path()
        self.functions: dict[str, isolation.FunctionContext] = {}
        # What the state machine's executions run as (its role): set at start.
        self._state_machine_context: isolation.FunctionContext | None = None
        # moto's own credentials (FOOBARKEY/FOOBARSECRET) would sign the functions' presigned
        # links with a secret every tool knows: the runtime's (`s3_links.SECRET`) stay.
        core = default_user_config.get("core", {}).copy()
        core["mock_credentials"] = False
        self._mock = mock_aws(config={"core": core, "stepfunctions": {"execute_state_machine": True}})
        self._saved_env: dict[str, str | None] = {}
        self.workers: WorkerPool | None = None
        self._undo = contextlib.ExitStack()
        self._tool_processes: ToolProcesses | None = None
        self.trigger_workers: WorkerPool | None = None
        # Where a file starts a run and where its answer lands (RunRequested: `event_bus_name`).
        self.trigger_bucket = triggers.TRIGGER_BUCKET
        self.trigger_prefix = triggers.INPUT_PREFIX
        self.output_prefix = triggers.OUTPUT_PREFIX
        self.drain_seconds = 30.0
        # A viewer (no workers) shows runs as they are; a runtime with workers takes them up.
        self._resume = resume if resume is not None else workers > 0
        self._durable: persistence.DurableState | None = None
        self.restored = persistence.Restored()
        self.resumed: list[str] = []

    # --- the clients it hands out ----------------------------------------------------------

    # Each runtime's own, made on first use: what a test registers on one stays with its runtime
    # (the runtime itself calls through the process's kept clients, infra/local/clients.py),
    # from the kept clients' session, so what the runtime's calls raise is caught by their classes.
    def _session(self) -> boto3.Session:
        kept: clients.Clients | None = getattr(self, "_aws", None)  # set at start
        return (kept or clients.kept(REGION)).session

    @functools.cached_property
    def dynamodb(self) -> "DynamoDBClient":
        return self._session().client("dynamodb", region_name=REGION)

    @functools.cached_property
    def s3(self) -> "S3Client":
        return self._session().client("s3", region_name=REGION)

    @functools.cached_property
    def sqs(self) -> "SQSClient":
        return self._session().client("sqs", region_name=REGION)

    @functools.cached_property
    def sfn(self) -> Any:
        return self._session().client("stepfunctions", region_name=REGION)

    @functools.cached_property
    def lambda_client(self) -> Any:
        return self._session().client("lambda", region_name=REGION)

    @functools.cached_property
    def secrets(self) -> Any:
        return self._session().client("secretsmanager", region_name=REGION)

    @functools.cached_property
    def events(self) -> Any:
        return self._session().client("events", region_name=REGION)

    @functools.cached_property
    def ses(self) -> Any:
        return self._session().client("ses", region_name=REGION)

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> "LocalRuntime":
        # What start-up makes (imported modules, moto's models and services, the handlers'
        # clients) lives as long as the runtime: made with the collector paused, whose passes
        # would only walk it, then kept out of its full passes (`keep`: frozen), which otherwise
        # walk all of it (~270,000 objects) and paused every thread for ~340 ms each time, a
        # third of a second added to whatever ran then. Measured: ~30 ms a full pass after this.
        # No collection first: it would add ~150 ms to start-up to free ~1,800 objects.
        with collector.paused(keep=True):
            self._start()
        return self

    def _start(self) -> None:
        patches.require_tested_moto()  # before anything is installed: refused, nothing to undo
        # The process's environment: the developer's, as the CLI and tests see it. Each
        # function sees its own on top (infra/local/isolation.py), built from the template.
        self._set_env(
            {
                "AWS_ACCESS_KEY_ID": "local",
                # Per process: what the functions sign (presigned links) no tool can sign.
                "AWS_SECRET_ACCESS_KEY": s3_links.SECRET,
                "AWS_SESSION_TOKEN": "local",
                "AWS_DEFAULT_REGION": REGION,
                "AWS_REGION": REGION,
                "TOOLPIPE_EMAIL_SENDER": os.environ.get("TOOLPIPE_EMAIL_SENDER", EMAIL_SENDER),
                **self._extra_env,
            }
        )
        # Never undone: a function's thread that outlives its runtime calls nothing, even after
        # the last runtime has put back what the ones below change.
        stopped_calls.install()
        self._undo = contextlib.ExitStack()  # what start changed in this process, undone at stop
        # Each function's cold start (its import, what it builds at its first call) kept as on
        # Lambda: the stop gives it back (`gc.unfreeze`).
        self._undo.callback(collector.keep_cold_starts())
        self._undo.callback(isolation.install())
        # Every botocore client, of any session, checks a function's calls from now on.
        self._undo.callback(iam.install())
        self._mock.start()
        self._undo.callback(lambdas.install())
        # A tool run in this process (an agent registered in code) follows its links here.
        self._undo.callback(s3_links.install())
        self._undo.callback(control_flow_logs.install())
        patches.install()
        self._undo.callback(serial.install())
        self._undo.callback(execution_events.install())
        self._undo.callback(triggers.install())
        try:
            self._create_resources()
        except BaseException:  # a template it cannot run: nothing is left installed
            self._undo_start()
            raise
        # The developer's model key is the orchestrator's alone now: out of the process's
        # environment (the C-level one too), so no tool reads it, nor a process a tool starts.
        for name in deployment.PRIVATE:
            if name in os.environ and name != "OPENAI_BASE_URL":
                self._saved_env.setdefault(name, os.environ.get(name))
                del os.environ[name]
        if self.deployment.rule_enabled(execution_ended_pattern(self.state_machine_arn)):
            execution_events.subscribe(self.state_machine_arn, self._execution_status_changed)
        self._cold_start()
        if self._state_dir is not None:
            self._load_state(self._state_dir)
        self.workers = WorkerPool(
            self._aws.sqs,
            self.queue_url,
            self.queue_arn,
            # As the deployed event source: at most its maximum concurrency at once.
            min(self._worker_count, self.deployment.worker_max_concurrency or self._worker_count),
            self.functions[TOOL_WORKER.name].timeout_seconds,
        )
        self.workers.start()
        triggers.notify_on_input_prefix(
            self._aws.s3, self._triggers_arn, self.trigger_bucket, self.trigger_prefix
        )
        self.trigger_workers = WorkerPool(
            self._aws.sqs,
            self.trigger_queue_url,
            self.trigger_queue_arn,
            1,
            self.functions[TRIGGERS.name].timeout_seconds if TRIGGERS.name in self.functions else 60,
            handler=triggers.HANDLER,
        )
        serial.add_listener(self._on_put_events)
        self.trigger_workers.start()
        if self._state_dir is not None and self._resume:
            self.resumed = self._resume_runs()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            # Executions run on moto's threads: left running, they would call AWS after the
            # mock is gone. Let them finish, then stop what is left.
            self.drain(timeout=self.drain_seconds)
            serial.remove_listener(self._on_put_events)
            for pool in (self.trigger_workers, self.workers):
                if pool is not None:
                    pool.stop()
            self._save_state()
        finally:
            execution_events.unsubscribe(self.state_machine_arn)
            try:
                self._undo_start()  # cold starts no longer kept (`collector.keep_cold_starts`)...
            finally:
                gc.unfreeze()  # ...then all given back, collectable once the runtime is gone

    def renew_tool_processes(self) -> None:
        """The app changed: each runner's next call imports it anew (calls running finish)."""
        if self._tool_processes is not None:
            self._tool_processes.renew()

    def _undo_start(self) -> None:
        if self._tool_processes is not None:
            self._tool_processes.__exit__(None, None, None)
            self._tool_processes = None
        lambdas.unregister_all()
        self._mock.stop()
        self._undo.close()
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def _set_env(self, values: dict[str, str]) -> None:
        for name, value in values.items():
            self._saved_env.setdefault(name, os.environ.get(name))
            os.environ[name] = value

    def _cold_start(self) -> None:
        # Handlers read settings and build services once per cold start; a new runtime is a
        # new cold start, so modules already imported are imported again, each as its function.
        for spec in FUNCTIONS.values():
            if spec.module in sys.modules:
                with isolation.running_as(self.functions.get(spec.name)):
                    importlib.reload(sys.modules[spec.module])

    def _create_resources(self) -> None:
        aws = self._aws = clients.kept(REGION)
        self.template = template.load(self._template_path)
        self.deployment = deployment.deploy(
            self.template,
            dynamodb=aws.dynamodb,
            s3=aws.s3,
            sqs=aws.sqs,
            iam_client=aws.iam,
            lambdas=aws.lambda_client,
            sfn=aws.sfn,
            events=aws.events,
            secrets=aws.secrets,
            names=LOCAL_NAMES,
            # The approval links' HMAC key lives in the state directory, so a link stays valid
            # after `toolpipe serve` restarts. The model key's secret is left empty, as the stack
            # creates it: locally the orchestrator reads the developer's OPENAI_API_KEY.
            secret_values={"signing_key": persistence.signing_key(self._state_dir)},
        )
        d = self.deployment
        if self._visibility != limits.QUEUE_VISIBILITY_SECONDS:  # a test's shorter redelivery
            aws.sqs.set_queue_attributes(
                QueueUrl=d.queue_url, Attributes={"VisibilityTimeout": str(self._visibility)}
            )
        self.queue_url, self.queue_arn, self.dlq_url = d.queue_url, d.queue_arn, d.dlq_url
        self.definition, self.state_machine_arn = d.definition, d.state_machine_arn
        self.signing_key_arn = d.signing_key_arn
        self.event_bus_name, self.event_bus_arn = d.bus_name, d.bus_arn
        self.trigger_bucket = d.trigger_bucket or triggers.TRIGGER_BUCKET
        self.trigger_prefix = d.trigger_prefix or triggers.INPUT_PREFIX
        self._triggers_arn = d.function_arns.get(TRIGGERS.name, "")
        self.functions = function_env.contexts(self.template, d, self._extra_env)
        for spec, logical_id, _ in self.template.functions():
            lambdas.register(self.functions[spec.name], spec.name, d.refs[logical_id])
        # Each runner's calls in processes of their own, as deployed (infra/local/tool_processes.py).
        runners = [
            (self.functions[spec.name], (spec.name, d.refs[logical_id]))
            for spec, logical_id, _ in self.template.functions()
            if spec.handler == TOOL_RUNNER.handler
        ]
        for context, _ in runners:  # a tool's link (its run's input) reads as the worker, its signer
            context.link_signer = self.functions[TOOL_WORKER.name]
        self._tool_processes = ToolProcesses(runners).__enter__()
        self._state_machine_context = d.state_machine_context()
        lambdas.run_executions_as(self._state_machine_context)

        # SES sends only from a verified identity, in moto as on AWS. The account is in SES's
        # sandbox, as a new one is (service_limits.py): it sends only to verified addresses and
        # domains. The sender's domain is verified as a deployer verifies theirs, so the example
        # emails addresses there and is refused any other (SES authorizes the address identity
        # when both are verified: the tool runner's grant names it).
        sender = os.environ["TOOLPIPE_EMAIL_SENDER"]
        aws.ses.verify_email_identity(EmailAddress=sender)
        aws.ses.verify_domain_identity(Domain=sender.rsplit("@", 1)[-1])
        # RunRequested on the bus starts runs (infra/local/triggers.py), from the sources the
        # template's rule names, while that rule is on.
        pattern = d.rule_for(RUN_REQUESTED_DETAIL_TYPE) or triggers.RUN_REQUESTED_PATTERN
        self.trigger_queue_url, self.trigger_queue_arn = triggers.create_event_trigger(
            aws.events, aws.sqs, self.event_bus_name, pattern=pattern, enabled=d.rule_enabled(pattern)
        )

    # --- the API, as API Gateway would call it ----------------------------------------------

    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        caller: str | None = LOCAL_CALLER,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Send one request to the real API handler as a REST API proxy event.

        `path` may carry a query string. `caller` is the identity API Gateway puts in the request
        context after IAM authorization (the signer's ARN); None sends a request without one.
        """
        status, answer, _ = self.api_response(method, path, body, caller=caller, headers=headers)
        return status, answer

    def api_response(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        caller: str | None = LOCAL_CALLER,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """`api`, with the answer's headers (`Retry-After`, `Idempotent-Replayed`...)."""
        resource, _, query = path.partition("?")
        parameters = urllib.parse.parse_qs(query, keep_blank_values=True)
        context: dict[str, Any] = {"requestId": str(uuid.uuid4()), "stage": "local", "httpMethod": method}
        if caller is not None:
            context["identity"] = {"userArn": caller, "caller": caller.rsplit("/", 1)[-1]}
        event = {
            "resource": resource,
            "path": resource,
            "httpMethod": method,
            "headers": {"content-type": "application/json", **(headers or {})},
            "multiValueHeaders": {},
            "queryStringParameters": {k: v[-1] for k, v in parameters.items()} or None,
            "multiValueQueryStringParameters": parameters or None,
            "pathParameters": None,
            "requestContext": context,
            "body": None if body is None else body if isinstance(body, str) else json.dumps(body),
            "isBase64Encoded": False,
        }
        response = lambdas.call_function(API, event)
        payload = response.get("body")
        answer_headers = {str(k): str(v) for k, v in (response.get("headers") or {}).items()}
        for name, values in (response.get("multiValueHeaders") or {}).items():
            answer_headers.setdefault(str(name), str(values[-1]))
        return int(response["statusCode"]), json.loads(payload) if payload else None, answer_headers

    def _on_put_events(self, request: Any) -> None:
        # moto's rule delivers to the queue inside PutEvents, with no SendMessage to announce it.
        if self.trigger_workers is not None:
            self.trigger_workers.wake(triggers.run_requests(request))

    # --- the execution-status rule, as EventBridge would apply it ---------------------------

    def _execution_status_changed(self, event: dict[str, Any]) -> None:
        """The stack's rule: an execution of this state machine that ended badly fails its run."""
        if matches(execution_ended_pattern(self.state_machine_arn), event):
            lambdas.call_function(ORCHESTRATOR, execution_ended_request(event))

    # --- runs ------------------------------------------------------------------------------

    def execution_arn(self, run_id: str, execution: int = 1) -> str:
        return (
            self.state_machine_arn.replace(":stateMachine:", ":execution:")
            + f":{execution_name(run_id, execution)}"
        )

    def tasks_in_progress(self) -> int:
        """How many Lambda tasks of this runtime's executions run now: a stopped execution ends
        at once, as on AWS, and its task (a model step) may still be running."""
        context = self._state_machine_context
        return 0 if context is None else lambdas.tasks_in_progress(context)

    def current_execution(self, run_id: str) -> int:
        """Which execution of the run is current: long runs continue in fresh ones."""
        item = self._aws.dynamodb.get_item(
            TableName=TABLE, Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "META"}}, ConsistentRead=True
        ).get("Item", {})
        return int(item.get("execution", {}).get("N", "1"))

    def wait_for_execution(self, run_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """Wait for the run's last execution to end (following any it continued in)."""
        deadline = time.monotonic() + timeout
        while True:
            ended = execution_events.endings()
            execution = self.current_execution(run_id)
            described: Mapping[str, Any]
            try:
                described = self._aws.sfn.describe_execution(
                    executionArn=self.execution_arn(run_id, execution)
                )
            except self._aws.sfn.exceptions.ExecutionDoesNotExist:
                described = {"status": "RUNNING"}  # recorded as next, about to start
            # An execution that ended badly is also handed to the status-change rule: wait for it
            # too, so the run record is final when this returns.
            if (
                described["status"] != "RUNNING"
                and self.current_execution(run_id) == execution
                and execution_events.idle(self.state_machine_arn, max(0.0, deadline - time.monotonic()))
            ):
                return dict(described)
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still running after {timeout} s")
            # An execution's end is what this waits for: sleep until one ends rather than asking
            # moto on a timer (the asking cost as much CPU as the run itself; every 0.25 s, 7% of
            # a 10-turn run's). An ending after `ended` was read wakes it at once, the hand-over
            # to a fresh execution included (the old one ends); the second is a backstop only.
            execution_events.wait_for_ending(ended, min(1.0, max(0.0, deadline - time.monotonic())))

    def drain(self, timeout: float, grace: float = 5.0) -> None:
        """Let running executions finish; after `timeout`, stop them and give them `grace`."""
        deadline = time.monotonic() + timeout
        stopped, quiet = False, contextlib.ExitStack()
        while True:
            running = self._aws.sfn.list_executions(
                stateMachineArn=self.state_machine_arn, statusFilter="RUNNING"
            )["executions"]
            # A stopped execution ends at once, as on AWS, while a Lambda task of it may still
            # run (a run cancelled or timed out just before, or stopped here): those are waited
            # for too, within the same time, before the mock they call goes away.
            if not running and not self.tasks_in_progress():
                break
            if time.monotonic() > deadline:
                if stopped:
                    break
                if self._state_dir is not None and self._resume:
                    # Runs are kept, not failed: with the rule off, a stop leaves them `running`
                    # in the saved state, and the next start resumes them (as after kill -9).
                    execution_events.unsubscribe(self.state_machine_arn)
                quiet.enter_context(logfile.quiet("moto.stepfunctions.parser"))
                for execution in running:
                    self._aws.sfn.stop_execution(
                        executionArn=execution["executionArn"], cause="local runtime shut down"
                    )
                stopped, deadline = True, time.monotonic() + grace
            time.sleep(0.05)
        # A stopped (or failed) execution's run is marked failed by the status-change rule:
        # let that finish before the mock goes away and the state is saved.
        execution_events.idle(self.state_machine_arn, timeout=grace)
        quiet.close()

    def execution_events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's execution history; read with `self.sfn`, so its errors are that client's
        (`runtime.sfn.exceptions.ExecutionDoesNotExist` catches a run not started yet)."""
        events: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"executionArn": self.execution_arn(run_id), "maxResults": 1000}
        while True:
            page = self.sfn.get_execution_history(**kwargs)
            events.extend(dict(event) for event in page["events"])
            if not page.get("nextToken"):
                return events
            kwargs["nextToken"] = page["nextToken"]

    # --- state kept between processes ------------------------------------------------------

    def _save_state(self) -> None:
        if self._durable is not None:
            self._durable.close()
            self._durable = None

    def _load_state(self, state_dir: Path) -> None:
        # The trigger bucket's notification is set only after this: a restored file starts no run.
        self._durable = persistence.DurableState(
            state_dir,
            self._aws.dynamodb,
            self._aws.s3,
            TABLE,
            BUCKET,
            more_buckets=(triggers.TRIGGER_BUCKET,),
        )
        self.restored = self._durable.open()

    def _resume_runs(self) -> list[str]:
        """Take up the runs the previous process left running; the ids of those that go on.

        Their executions died with that process, and so did every task token its messages carry
        (the queue is not kept: each message is re-dispatched from the history instead).
        """
        store = DynamoHistoryStore(
            boto3.resource("dynamodb", region_name=REGION).Table(TABLE), self._aws.s3, BUCKET
        )
        recovery.expire_claims(self._aws.dynamodb, TABLE)
        starter = StepFunctionsStarter(self._aws.sfn, self.state_machine_arn)
        return recovery.resume_runs(
            self._aws.dynamodb,
            TABLE,
            store,
            starter,
            StepFunctionsTaskReporter(self._aws.sfn),
            build_events(
                EventSettings.from_env(self.functions[ORCHESTRATOR.name].environment), aws=AwsClients()
            ),
        )
