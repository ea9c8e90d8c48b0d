"""Each local function's environment and role, as the template deploys them, with what the
Lambda service and the local runtime add (its region, its credentials, the developer's app)."""

import os
from collections.abc import Mapping

from toolpipe.infra.cdk.functions import API, ORCHESTRATOR, TRIGGERS
from toolpipe.infra.local import deployment, isolation, s3_links
from toolpipe.infra.local.client import CALLER_HEADER, LOCAL_CALLER
from toolpipe.infra.local.template import Template
from toolpipe.shared.app_ref import APP_ENV, APP_PATH_ENV, find_app

REGION = deployment.REGION


def contexts(
    template: Template, d: deployment.Deployment, extra_env: Mapping[str, str]
) -> dict[str, isolation.FunctionContext]:
    """Each function's environment (the template's, the Lambda service's, the local
    additions) and its role; `extra_env` goes to the functions whose template sets the name,
    to the orchestrator for the model's settings, and to every function otherwise."""
    app = find_app()
    found: dict[str, isolation.FunctionContext] = {}
    templated = {
        spec.name: set(props.get("Environment", {}).get("Variables", {}))
        for spec, _, props in template.functions()
    }
    owned = d.owned_names() | frozenset(extra_env)
    for spec, _, props in template.functions():
        local = {
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_LAMBDA_FUNCTION_NAME": d.refs[template.function(spec)[0]],
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(props.get("MemorySize", 128)),
            "AWS_LAMBDA_FUNCTION_TIMEOUT": str(props.get("Timeout", 3)),
            "AWS_ACCESS_KEY_ID": "local",
            # Per process: what the functions sign (presigned links) no tool can sign.
            "AWS_SECRET_ACCESS_KEY": s3_links.SECRET,
            "AWS_SESSION_TOKEN": "local",
            "POWERTOOLS_TRACE_DISABLED": "1",
            "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
        }
        if spec is TRIGGERS:
            local["TOOLPIPE_TRIGGER_PRINCIPAL"] = LOCAL_CALLER
        if spec is API:  # its served OpenAPI document names the header (server.py reads it)
            local["TOOLPIPE_LOCAL_CALLER_HEADER"] = CALLER_HEADER
        context = d.function_context(spec, local, owned)
        environment = context.environment
        if app is not None:
            environment[APP_ENV] = app.module
            if app.path:
                environment[APP_PATH_ENV] = app.path
        else:
            environment.pop(APP_ENV, None)  # the handlers look for the project's pyproject.toml
        if spec is ORCHESTRATOR and os.environ.get("OPENAI_API_KEY"):
            environment["OPENAI_API_KEY"] = os.environ["OPENAI_API_KEY"]
        for name, value in extra_env.items():
            anywhere = any(name in names for names in templated.values())
            model_setting = name in deployment.PRIVATE
            if (
                (name in templated[spec.name])
                or (not anywhere and not model_setting)
                or (model_setting and spec is ORCHESTRATOR)
            ):
                environment[name] = value
        context.passthrough = deployment.passthrough(spec.name)
        found[spec.name] = context
    return found
