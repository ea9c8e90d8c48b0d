"""The `toolpipe` command line: its commands, their arguments and help, and the checks made
before a command starts (the app, flags that do not go together)."""

import argparse
import json
import os
from typing import Any, TextIO

from toolpipe.infra.cdk.functions import FUNCTIONS
from toolpipe.infra.cli import arguments, suggestions
from toolpipe.infra.cli.errors import EXIT_USAGE
from toolpipe.infra.cli.remote import API_KEY_ENV, API_URL_ENV

DEFAULT_PORT = 8710
APPROVAL_STATUSES = ("pending", "approved", "denied", "expired", "answered", "all")
# Commands that only read runs, and may read a stopped folder's saved state (infra/cli/offline.py).
READ_ONLY_COMMANDS = ("show", "approvals")

EPILOG = """\
output: results on stdout; banners, warnings and errors on stderr; --json makes stdout one
  JSON document (an error: {"error": "...", "exit_code": N} on stderr). Logs (handlers,
  emulator) go to $TOOLPIPE_HOME/toolpipe.log (default: .toolpipe/ in the project's root, the
  nearest folder whose pyproject.toml has [tool.toolpipe]); --verbose also prints them.
exit status: 0 ok, 1 the run failed (or what was asked could not be done), 2 usage error
  (bad flags or input, unknown agent), 130 interrupted, 141 stdout closed early.
"""

APP_HELP = (
    "your module that defines the agents (default: TOOLPIPE_APP, else [tool.toolpipe] app in the "
    "nearest pyproject.toml)"
)


# `run` and `serve`: your own tools called offline (infra/local/model_script.py has the format).
_SCRIPTED_MODEL: dict[str, Any] = {
    "type": arguments.readable_file,
    "metavar": "FILE",
    "help": "answer as the model scripted in FILE (YAML: scripts of `when` and `replies`) instead "
    "of OPENAI_BASE_URL (default: TOOLPIPE_SCRIPTED_MODEL, else [tool.toolpipe] scripted_model of "
    "the project, with no OPENAI_BASE_URL; else the demo model)",
}


def _add_api_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--api",
        metavar="URL",
        type=arguments.api_url,
        default=os.environ.get(API_URL_ENV, "").strip() or None,
        help=f"a deployed stack's API (its ApiUrl output, https://…/v1/) instead of the local server; "
        f"requests are signed with SigV4 (default: ${API_URL_ENV})",
    )
    command.add_argument(
        "--api-key",
        metavar="KEY",
        default=os.environ.get(API_KEY_ENV) or None,
        help=f"with --api, send this key (x-api-key) instead of signing: a stack deployed with "
        f"api_auth=api_key (default: ${API_KEY_ENV})",
    )


def _parser(out: TextIO, err: TextIO, json_errors: bool, remote: bool) -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        def print_help(self, file: Any = None) -> None:  # --help is what was asked for: stdout
            super().print_help(file or out)

        def error(self, message: str) -> Any:  # argparse's documented hook; must not return
            message = suggestions.with_choice_hint(message)
            if json_errors:
                err.write(json.dumps({"error": f"{self.prog}: {message}", "exit_code": EXIT_USAGE}) + "\n")
            else:
                self.print_usage(err)
                err.write(f"{self.prog}: error: {message}\n")
            raise SystemExit(EXIT_USAGE)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    common.add_argument("--app", metavar="MODULE", help=APP_HELP)
    common.add_argument(
        "--verbose", action="store_true", help="also print logs on stderr (they always go to toolpipe.log)"
    )
    options: dict[str, Any] = {
        "parents": [common],
        "epilog": EPILOG,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
    parser = Parser(
        prog="toolpipe",
        description="Run toolpipe agents on the local runtime.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--app", metavar="MODULE", help=APP_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init_parser = commands.add_parser(
        "init", help="create a project of your own: agents, a test, a CDK app", **options
    )
    init_parser.add_argument(
        "directory", type=arguments.folder, help="the project's folder (created if missing)"
    )
    init_parser.add_argument("--package", help="its Python package (default: from the folder's name)")

    run_parser = commands.add_parser("run", help="run an agent on a prompt and print each step", **options)
    run_parser.add_argument("prompt", type=arguments.prompt, help="the user's message (not blank)")
    run_parser.add_argument(
        "--agent",
        type=arguments.agent_name(remote),
        help="the agent to run (default: the first your app defines); `toolpipe agents` lists the "
        "agents and their tools",
    )
    run_parser.add_argument(
        "--model", type=arguments.model_name, help="model name (default: TOOLPIPE_MODEL or gpt-4o-mini)"
    )
    run_parser.add_argument("--scripted-model", **_SCRIPTED_MODEL)
    run_parser.add_argument(
        "--timezone",
        type=arguments.timezone,
        help="the user's IANA time zone, e.g. Europe/Paris (default: TZ if it names one, else UTC)",
    )
    run_parser.add_argument(
        "--timeout", type=arguments.wait_seconds, default=300.0, help="seconds to wait for the run (0-3600]"
    )
    run_parser.add_argument(
        "--mcp",
        type=arguments.mcp_url,
        action="append",
        metavar="URL",
        help="also offer this MCP server's tools (mcp_<tool>)",
    )

    show_parser = commands.add_parser("show", help="print a run's history", **options)
    show_parser.add_argument("run_id", type=arguments.run_id)
    delete_parser = commands.add_parser(
        "delete", help="delete an ended run and its child runs now (every item and stored object)", **options
    )
    delete_parser.add_argument("run_id", type=arguments.run_id)
    resume_parser = commands.add_parser(
        "resume", help="resume a run that ended failed or limit, from its last stored turn", **options
    )
    resume_parser.add_argument("run_id", type=arguments.run_id)
    arguments.add_limit_flags(resume_parser)
    fork_parser = commands.add_parser(
        "fork", help="start a new run from a run's first N turns (copied, never run again)", **options
    )
    fork_parser.add_argument("run_id", type=arguments.run_id)
    fork_parser.add_argument("--turn", type=int, required=True, metavar="N", help="how many turns to keep")
    fork_parser.add_argument("--input", metavar="TEXT", help="a new user message the fork goes on with")
    approvals_parser = commands.add_parser(
        "approvals", help="list the tool calls that wait for your approval (and decided ones)", **options
    )
    approvals_parser.add_argument(
        "--status", choices=APPROVAL_STATUSES, default="pending", help="which approvals (default: pending)"
    )
    approve_parser = commands.add_parser("approve", help="approve a call that waits: it runs", **options)
    approve_parser.add_argument("approval_id", type=arguments.approval_id)
    approve_parser.add_argument(
        "--arguments",
        type=arguments.arguments_object,
        metavar="JSON",
        help="run the call with these arguments instead of the model's (a JSON object; the tool "
        "checks them, and the model is told)",
    )
    deny_parser = commands.add_parser(
        "deny", help="deny a call that waits, with a reason the model reads", **options
    )
    deny_parser.add_argument("approval_id", type=arguments.approval_id)
    deny_parser.add_argument(
        "--reason", type=arguments.reason_text, required=True, help="why (the model reads it)"
    )
    answer_parser = commands.add_parser(
        "answer", help="answer a question a tool call asks you (a human-input tool)", **options
    )
    answer_parser.add_argument("approval_id", type=arguments.approval_id)
    given = answer_parser.add_mutually_exclusive_group(required=True)
    given.add_argument("text", nargs="?", help="your answer, as free text")
    # `--value`, not `--json`: every command's `--json` prints its output as JSON.
    given.add_argument(
        "--value",
        dest="json_value",
        type=arguments.json_value,
        default=arguments.NO_JSON,
        metavar="JSON",
        help="your answer as a JSON value, for a question with a form (result schema)",
    )
    for api_command in (
        run_parser,
        show_parser,
        delete_parser,
        resume_parser,
        fork_parser,
        approvals_parser,
        approve_parser,
        deny_parser,
        answer_parser,
    ):
        _add_api_arguments(api_command)

    commands.add_parser("agents", help="list the agents and their tools", **options)

    invoke_parser = commands.add_parser(
        "invoke",
        help="run one handler on an event file (see events/); prints its JSON result (exit 1 on an "
        "error, an API answer of 4xx or 5xx included)",
        **options,
    )
    invoke_parser.add_argument("function", choices=sorted(FUNCTIONS))
    invoke_parser.add_argument(
        "event", type=arguments.event_file, help="path of a JSON event, e.g. events/api_post_run.json"
    )
    invoke_parser.add_argument("--run-id", type=arguments.run_id, help="replaces RUN_ID in the event")
    invoke_parser.add_argument(
        "--approval-id",
        type=arguments.approval_id,
        help="replaces APPROVAL_ID in the event (the approval routes' path, e.g. events/api_approve.json)",
    )
    invoke_parser.add_argument(
        "--object",
        type=arguments.readable_file,
        metavar="FILE",
        help="triggers: put FILE as the object an S3 notification names, first",
    )

    serve_parser = commands.add_parser(
        "serve",
        help="serve the local runtime over HTTP until Ctrl-C; reloads your app when its files change",
        **options,
    )
    serve_parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve_parser.add_argument(
        "--port",
        type=arguments.port,
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    serve_parser.add_argument(
        "--aws-port",
        type=arguments.port,
        help="port of the AWS endpoint (default: --port + 1, or a free one with --port 0)",
    )
    serve_parser.add_argument("--scripted-model", **_SCRIPTED_MODEL)
    serve_parser.add_argument(
        "--idle-exit",
        type=arguments.seconds(None),
        metavar="SECONDS",
        help="stop after this long with no request and no run at work; calls that wait for a person are kept "
        "for the next server (default: never)",
    )
    # Set by a command that starts a server for its own duration (infra/cli/discovery.py); not for
    # people: such a server may be stopped and replaced by a command that asks for another model.
    serve_parser.add_argument("--for-client", action="store_true", help=argparse.SUPPRESS)
    commands.add_parser(
        "status", help="show the local server (pid, URL, model, app) and the calls that wait", **options
    )
    commands.add_parser("stop", help="stop the local server (calls that wait are kept)", **options)
    return parser


def name_the_app(argv: list[str]) -> bool:
    """Find the app once, here, and hand it on through the environment: to this process's
    handlers and to a server it starts (which may run from another folder). `init` and a
    command for a deployed API need none.

    Returns:
        Whether the command talks to a deployed API (`--api`): its agents are not this folder's.
    """
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--app")
    early.add_argument("--api", default=os.environ.get(API_URL_ENV) or None)
    early.add_argument("command", nargs="?")
    known, _ = early.parse_known_args(argv)
    remote = bool(known.api)
    # The reads of a stopped folder need no app, and loading it (the agents, their tools) costs
    # more than the read; a server started for them finds it as `serve` does (infra/cli/offline.py).
    if known.command in ("init", "status", "stop", *READ_ONLY_COMMANDS) or remote:
        return remote
    name_app(known.app)
    return remote


def name_app(module: str | None) -> None:
    """Name the app: `module` (`--app`), else the one `find_app` finds, if any."""
    from toolpipe.shared.app_ref import AppRef, find_app, use_app, valid_module_name

    ref = AppRef(valid_module_name(module.strip(), "--app"), os.getcwd()) if module else find_app()
    if ref is not None:
        use_app(ref)


def parse(argv: list[str], out: TextIO, err: TextIO, json_errors: bool, remote: bool) -> argparse.Namespace:
    """The command's arguments, or SystemExit(2) with argparse's message (as JSON with `--json`)."""
    parser = _parser(out, err, json_errors, remote)
    # `parse_args` itself, but an unknown option is named with the nearest known one.
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.error(suggestions.unrecognized(extras, parser, args.command))
    if getattr(args, "api_key", None) and not getattr(args, "api", None):
        parser.error("--api-key (or TOOLPIPE_API_KEY) goes with --api (or TOOLPIPE_API_URL)")
    if getattr(args, "api", None) and getattr(args, "scripted_model", None):
        parser.error("--scripted-model applies to the local server: a deployed stack calls its own model")
    if getattr(args, "api", None) and getattr(args, "model", None):
        parser.error(
            "--model applies to the local server: a deployed stack's model is set when deploying (-c model_name=…)"
        )
    if args.command == "run" and args.timezone is None:
        args.timezone = arguments.default_timezone(err)
    return args
