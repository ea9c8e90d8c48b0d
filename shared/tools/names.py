"""Wire names: what the model API is told a tool is called, unique within an agent.

Chat Completions refuses function names outside `^[a-zA-Z0-9_-]{1,64}$`, while tools from
other catalogues (explicit schemas, MCP servers) are called `crm.customers.lookup` or
`send email`. The rule, the same whatever order tools are given in:

1. a name the API accepts is sent as written;
2. any other name has each run of other characters replaced by `_` (and is cut to fit);
3. when that replacement is another tool's name, or two replaced names meet, every replaced
   name involved gets `_` and 8 hex digits of the SHA-256 of its original name instead.

Names are never chosen by position, so adding, removing or reordering tools never moves a
name from one tool to another; only a replaced name that starts colliding changes (to its
hashed form). The original name stays on the tool (`source_name`) and resolves to it too.
"""

import hashlib
import re
from collections import Counter
from collections.abc import Iterable

from toolpipe.shared.errors import DefinitionError

# The Chat Completions API rejects function names outside this pattern.
WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_OTHER = re.compile(r"[^a-zA-Z0-9_-]+")
_DIGEST = 8


def wire_name(name: str) -> str:
    """The name as the API accepts it: as written when it can be, else with other characters
    replaced by `_`; a name still too long keeps its first 55 characters and a hash."""
    if WIRE_NAME.match(name):
        return name
    safe = _OTHER.sub("_", name).strip("_") or "tool"
    if len(safe) <= 64:
        return safe
    return hashed_wire_name(name)


def hashed_wire_name(name: str) -> str:
    """The replaced name, then `_` and 8 hex digits of the SHA-256 of the original name."""
    safe = _OTHER.sub("_", name).strip("_") or "tool"
    digest = hashlib.sha256(name.encode()).hexdigest()[:_DIGEST]
    return f"{safe[: 64 - _DIGEST - 1]}_{digest}"


def assign_wire_names(names: Iterable[str], taken: Iterable[str] = ()) -> dict[str, str]:
    """Original name -> wire name for a set of distinct names, unique among themselves and
    apart from `taken` (names already given out, e.g. an agent's own tools when naming an MCP
    server's). A name in `taken` that the API accepts as written is hashed like a replaced one.

    Raises `DefinitionError` in the (SHA-256-unlikely) case a hashed name is taken as well.
    """
    originals = list(names)
    reserved = set(taken)
    plain = {name: wire_name(name) for name in originals}
    # How many of the names want each wire name (a name sent as written wants itself).
    wanted = Counter(plain.values())
    assigned: dict[str, str] = {}
    for name in originals:
        wire = plain[name]
        # A name sent as written is never displaced by a replaced one; only `taken` displaces it.
        clash = wire in reserved or (wanted[wire] > 1 and wire != name)
        assigned[name] = hashed_wire_name(name) if clash else wire
    seen: dict[str, str] = {}
    for name, wire in assigned.items():
        other = seen.get(wire)
        if other is not None or wire in reserved:
            raise DefinitionError(
                f"tools '{other or wire}' and '{name}' both map to the wire name '{wire}': rename one"
            )
        seen[wire] = name
    return assigned
