"""Numbers the stack and the local runtime share, so both run the same system."""

WORKER_TIMEOUT_SECONDS = 120
ORCHESTRATOR_TIMEOUT_SECONDS = 300
API_TIMEOUT_SECONDS = 29  # API Gateway's integration timeout
# AWS advises a visibility timeout of at least 6 x the function timeout for SQS sources.
QUEUE_VISIBILITY_SECONDS = 6 * WORKER_TIMEOUT_SECONDS
MAX_RECEIVES = 3  # then the message goes to the DLQ and the task's Catch answers the model
