"""`toolpipe show RUN_ID`: a run's history, its tool executions, its usage and where its timeline
page is."""

import argparse
import json
from typing import Any, TextIO

from toolpipe.infra.cli.errors import EXIT_OK
from toolpipe.infra.cli.offline import open_reading_session
from toolpipe.infra.cli.output import format_item, short, write_json
from toolpipe.infra.cli.session import page_url, run_view


def show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    session = open_reading_session(args)
    try:
        body = run_view(session, args.run_id)
        page = page_url(session, args.run_id)
    finally:
        session.close()
    if args.json:
        write_json(out, body)
        return EXIT_OK
    record = body["run"]
    out.write(
        f"run {record['run_id']} · agent {record['agent']} · {record['status']} · created {record['created_at']}\n"
    )
    for handoff in record.get("handoffs") or []:
        out.write(
            f"handoff after turn {handoff['turn']}: {handoff['from_agent']} -> {handoff['to_agent']}"
            f" ({handoff['kind']})\n"
        )
    write_history(out, record, body["messages"])
    _write_executions(out, body["executions"])
    usage = record["usage"]
    out.write(
        f"usage: {usage['model_calls']} model call(s) · {usage['prompt_tokens']} prompt + "
        f"{usage['completion_tokens']} completion tokens · ${record['cost_usd']:.6f}\n"
    )
    cost = body.get("cost")
    if cost:
        out.write(_cost_line(cost))
    if record.get("error"):
        # Part of the run's history, not this command's error: the command did what it was asked.
        out.write(f"error: {record['error']}\n")
    if page is not None:
        out.write(f"timeline: {page}\n")
    if record.get("trace"):
        # To find the run in a tracing backend, when its spans were exported (README "Observability").
        out.write(f"trace: {record['trace']['trace_id']}\n")
    return EXIT_OK


def write_history(out: TextIO, record: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """The run's history items, with where it was forked from, each resume where it falls (after
    the turn it went on from) and the runs forked from it."""
    if record.get("forked_from"):
        origin = record["forked_from"]
        out.write(f"forked from run {origin['run_id']} after turn {origin['turn']}\n")
    resumes = list(record.get("resumes") or [])
    for item in messages:
        while resumes and item["turn"] > resumes[0]["turn"]:
            out.write(resume_line(resumes.pop(0)))
        out.write(
            "\n".join(
                f"[{item['seq']}] {line}" if i == 0 else f"    {line}"
                for i, line in enumerate(format_item(item, record["agent"]))
            )
            + "\n"
        )
    for resume in resumes:  # none of the resumed execution's turns stored yet
        out.write(resume_line(resume))
    for fork in record.get("forks") or []:
        out.write(f"forked into run {fork}\n")


def resume_line(resume: dict[str, Any]) -> str:
    """A resume, where it falls in the history: after the turn it went on from."""
    raised = ", ".join(f"{name} {value}" for name, value in (resume.get("limits") or {}).items() if value)
    return (
        f"resumed after turn {resume['turn']} in execution {resume['execution']} by {resume['by']}"
        f" (it had ended {resume['ended']}: {resume.get('error') or '-'})"
        + (f"; raised {raised}" if raised else "")
        + "\n"
    )


def _write_executions(out: TextIO, executions: list[dict[str, Any]]) -> None:
    if not executions:
        return
    out.write("tool executions:\n")
    for e in executions:
        took = "-" if e["duration_ms"] is None else f"{e['duration_ms']} ms"
        kind = f" {e['error_type']}" if e["error_type"] else ""
        out.write(
            f"  turn {e['turn']} {e['tool']}({short(json.dumps(e['arguments']), 80)})"
            f" · {e['status']}{kind} · {took} · attempts {e['attempts'] or 0}\n"
        )


def _cost_line(cost: dict[str, Any]) -> str:
    ops = cost["operations"]
    transitions, units = ops["state_transitions"], ops["read_units"] + ops["write_units"]
    invocations = sum(use["requests"] for use in ops["functions"].values())
    return (
        f"cost: ${cost['total_usd']:.6f} = model ${cost['model_usd']:.6f} + AWS ${cost['infra_usd']:.6f}"
        f" ({transitions} state transitions · {invocations} Lambda invocations · {units:g} DynamoDB units;"
        f" {_prices(cost['prices'])})\n"
    )


def _prices(prices: dict[str, Any]) -> str:
    """Where the prices come from, naming the region once: the default source names it already
    ("AWS list prices, us-east-1, on-demand, 2025"), a stack owner's own may not."""
    source, region = str(prices["source"]), str(prices["region"])
    return source if region in source else f"{source}, {region}"
