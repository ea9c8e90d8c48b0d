"""The Lambda functions: where each handler lives and how long it may run, defined once.

The stack deploys them from this table (`infra/cdk/constructs/functions.py`); `toolpipe invoke`
and the local runtime call the same handlers with the same timeouts. A handler moved or a
timeout changed here reaches all three, so none can be left running another configuration.
This module imports neither `aws_cdk` nor moto: the CLI and the runtime read it cheaply.
"""

from dataclasses import dataclass, replace

from toolpipe.infra.cdk import limits


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function as every place that runs it must see it."""

    # `toolpipe invoke NAME`, and the function's name in the local runtime.
    name: str
    # The function's construct id in the stack (so its logical id: keep it stable).
    construct_id: str
    # `package.module.function`, as Lambda's Handler setting names it.
    handler: str
    timeout_seconds: int
    memory_mb: int = 512
    # The run events it publishes (detail-types, shared/runs/events.py): its role may put these
    # on the bus and no other (infra/cdk/constructs/events.py). Found by who calls each publisher.
    publishes: tuple[str, ...] = ()
    # A named tool runner's name (`runner_spec`); None for every other function and the default runner.
    runner: str | None = None

    @property
    def module(self) -> str:
        """The handler's module: what a cold start imports."""
        return self.handler.rpartition(".")[0]

    @property
    def function(self) -> str:
        return self.handler.rpartition(".")[2]


ORCHESTRATOR = FunctionSpec(
    name="orchestrator",
    construct_id="Orchestrator",
    handler="toolpipe.functions.orchestrator.handler.lambda_handler",
    timeout_seconds=limits.ORCHESTRATOR_TIMEOUT_SECONDS,
    # The model step's calls and endings, a child run's answer to its parent's call, and the
    # calls that wait for a person or a program (it stores their approvals), and the waits for
    # the model's rate limit.
    publishes=(
        "ToolCallCompleted",
        "RunCompleted",
        "RunFailed",
        "RunHandedOff",
        "ApprovalRequested",
        "ToolCallRequested",
        "ModelRateLimited",
    ),
)
TOOL_WORKER = FunctionSpec(
    name="tool_worker",
    construct_id="ToolWorker",
    handler="toolpipe.functions.tool_worker.handler.lambda_handler",
    timeout_seconds=limits.WORKER_TIMEOUT_SECONDS,
    # Its calls' outcomes, and an agent tool's child run: started, or cancelled with its parent.
    # Tool code runs here: never RunRequested (a run as the trigger principal) or ApprovalRequested
    # (a link of its choosing in the approvers' mail).
    publishes=("ToolCallCompleted", "RunStarted", "RunCancelled"),
)
# A call's tool code, invoked by the worker: a role with no key to the pipeline.
TOOL_RUNNER = FunctionSpec(
    name="tool_runner",
    construct_id="ToolRunner",
    handler="toolpipe.functions.tool_runner.handler.lambda_handler",
    timeout_seconds=limits.TOOL_RUNNER_TIMEOUT_SECONDS,
)
# The environment variable that names a named runner's function's runner: how the local runtime
# tells the runners' functions apart in the template (they share a handler).
RUNNER_ENV = "TOOLPIPE_RUNNER"

# What the pipeline's own functions are given beside their settings, and the tool runners are
# not: pydantic's plugins off. pydantic looks for plugins at its first model, reading every
# installed package's entry points (~11-15 ms of the tool worker's cold import here, with this
# checkout's packages); toolpipe uses none. The runners, where your tools run, keep them: a tool
# may use one (logfire's, say).
PLUGINS_OFF = {"PYDANTIC_DISABLE_PLUGINS": "__all__"}


def runner_spec(runner: str) -> FunctionSpec:
    """A named runner's function (`@tool(runner=...)`): the default runner's handler, timeout and
    memory, under a name and a construct id of its own ("mail": `tool_runner_mail`, `ToolRunnerMail`)."""
    return replace(
        TOOL_RUNNER,
        name=f"{TOOL_RUNNER.name}_{runner}",
        construct_id=f"{TOOL_RUNNER.construct_id}{runner.capitalize()}",
        runner=runner,
    )


API = FunctionSpec(
    name="api",
    construct_id="Api",
    handler="toolpipe.functions.api.handler.lambda_handler",
    timeout_seconds=limits.API_TIMEOUT_SECONDS,
    # Runs it starts or resumes (failed when they cannot start) or cancels, and the results people and
    # programs post for waiting calls.
    publishes=("RunStarted", "RunResumed", "RunFailed", "RunCancelled", "ToolCallCompleted"),
)
# S3 files and RunRequested events (infra/cdk/constructs/triggers.py, README "Triggers").
TRIGGERS = FunctionSpec(
    name="triggers",
    construct_id="Function",  # inside the Triggers construct
    handler="toolpipe.functions.triggers.handler.lambda_handler",
    timeout_seconds=60,
    publishes=("RunStarted", "RunFailed"),  # the runs it starts, failed when they cannot start
)

# Every function, by name: the choices of `toolpipe invoke`.
FUNCTIONS: dict[str, FunctionSpec] = {
    spec.name: spec for spec in (API, ORCHESTRATOR, TOOL_WORKER, TOOL_RUNNER, TRIGGERS)
}
