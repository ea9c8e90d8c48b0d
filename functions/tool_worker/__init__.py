"""The tool worker function: one tool call from the SQS queue, claimed, run and answered once."""
