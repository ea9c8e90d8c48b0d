"""The Lambda functions, one package each, each a thin handler over `shared/`: the orchestrator
(a model step), the tool worker (a tool call from the queue), the tool runner (tool code, with no
keys of the run), the API and the triggers (S3 objects and events that start runs)."""
