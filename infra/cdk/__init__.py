"""The CDK side: the state machine's definition (`definition.py`, checked by `asl_rules.py`), the
functions' specs (`functions.py`, `limits.py`), the constructs (`constructs/`), `ToolPipeline`
(`pipeline.py`) and the stack and app that deploy it (`stack.py`, `app.py`), the layers
(`bundling.py`, `layers/`) and the checks AWS applies (`deploy_checks.py`)."""
