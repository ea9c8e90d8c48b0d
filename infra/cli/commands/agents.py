"""`toolpipe agents`: the agents `--agent` can name, with their tools (read locally, no server)."""

import argparse
from typing import Any, TextIO

from toolpipe.infra.cli.errors import EXIT_OK, EXIT_USAGE, CommandError
from toolpipe.infra.cli.output import short, write_json


def default_agent() -> str:
    """The agent a run gets without `--agent`: the first the app defines (loading the app)."""
    from toolpipe.shared.agents import default_agent_name

    return default_agent_name()


def _describe_agents() -> list[dict[str, Any]]:
    """Your app's agents, in the order it defines them (the first is the default)."""
    from toolpipe.shared.agents import all_agents, transfer_specs

    return [
        {
            "name": agent.name,
            "model": agent.model,
            "instructions": agent.instructions,
            "tools": [
                *({"name": t.name, "description": t.description} for t in agent.tools),
                # The handoffs, as the model sees them: `transfer_to_<agent>` tools.
                *(
                    {"name": spec["function"]["name"], "description": spec["function"]["description"]}
                    for spec in transfer_specs(agent)
                ),
            ],
            # Listed at run time (an MCP server): naming them here would mean reaching the server.
            "tool_sources": [source.name for source in agent.tool_sources],
        }
        for agent in all_agents()
    ]


def agents(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Each agent on a line, then its tools' first lines (or one JSON document)."""
    described = _describe_agents()
    if not described:
        from toolpipe.shared.agents import NO_AGENTS

        raise CommandError(NO_AGENTS, EXIT_USAGE)
    if args.json:
        write_json(out, {"agents": described})
        return EXIT_OK
    for agent in described:
        model = agent["model"] or "the default model"
        out.write(f"{agent['name']} ({model}): {short(agent['instructions'], 120)}\n")
        width = max((len(t["name"]) for t in agent["tools"]), default=0)
        for t in agent["tools"]:
            first_line = (t["description"] or "").strip().splitlines()[:1]
            out.write(f"  {t['name']:<{width}}  {short(first_line[0] if first_line else '', 100)}\n")
        for source in agent["tool_sources"]:
            out.write(f"  (and the tools of tool source '{source}', listed when a run starts)\n")
    return EXIT_OK
