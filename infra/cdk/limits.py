"""Numbers the stack and the local runtime share, so both run the same system.

The tool-call timings hang together; `tests/infra/test_timings.py` checks these invariants
on the synthesized template:

- visibility >= 6 x worker timeout (AWS's advice for SQS event sources: Lambda's poller can
  retry a throttled batch within that window);
- claim lease (worker timeout + margin) < visibility, so a redelivery finds the lease over;
- heartbeat timeout > visibility + margin: the worker beats as soon as it takes a delivery
  and then every `HEARTBEAT_EVERY_SECONDS`, so the longest silence of a live call is one
  visibility timeout (a crashed delivery, then its redelivery's first beat);
- call timeout >= max receives x visibility + heartbeat timeout: every redelivery and the
  move to the DLQ happen before the task gives up, and the heartbeat `Catch` ends the call
  after the last delivery went silent.

With these numbers a call whose worker crashes every time is delivered at 0, 720 and
1,440 s, goes to the DLQ at 2,160 s, and the model reads the error at about 2,340 s (the
heartbeat timeout after the last delivery's beat), well inside the 3,060 s call timeout.
"""

WORKER_TIMEOUT_SECONDS = 120
# The tool runner (a call's tool code, invoked by the worker) ends before the worker does, with
# room left for the worker to store the outcome and answer the task.
TOOL_RUNNER_TIMEOUT_SECONDS = WORKER_TIMEOUT_SECONDS - 15
ORCHESTRATOR_TIMEOUT_SECONDS = 300
API_TIMEOUT_SECONDS = 29  # API Gateway's integration timeout

QUEUE_VISIBILITY_SECONDS = 6 * WORKER_TIMEOUT_SECONDS  # 720
MAX_RECEIVES = 3  # then the message goes to the DLQ and the task's Catch answers the model
# functions/tool_worker/handler.py claims a call for its remaining time plus this margin.
CLAIM_LEASE_MARGIN_SECONDS = 30
# Between two heartbeats of a running tool: a third of the slack above a visibility timeout,
# so one lost beat never ends a live call.
HEARTBEAT_EVERY_SECONDS = 60
# Above a visibility timeout: room for Lambda's poller to pick the redelivery up and beat.
HEARTBEAT_MARGIN_SECONDS = 180
CALL_HEARTBEAT_SECONDS = QUEUE_VISIBILITY_SECONDS + HEARTBEAT_MARGIN_SECONDS  # 900
CALL_TIMEOUT_SECONDS = MAX_RECEIVES * QUEUE_VISIBILITY_SECONDS + CALL_HEARTBEAT_SECONDS  # 3,060

# How long a call that needs approval waits for a person before it counts as denied: a day, well
# inside the execution's own limit below. Nothing beats while a person decides, so the
# heartbeat timeout is the same.
APPROVAL_TIMEOUT_SECONDS = 24 * 3600

# One execution's own limit (Standard allows a year). Long enough for a person to answer an
# approval over a holiday; short enough that a forgotten run ends, and the execution-status
# rule marks it failed, within a month. Long runs continue in fresh executions, each with
# this limit of its own.
EXECUTION_TIMEOUT_SECONDS = 30 * 24 * 3600
