"""How a run's Step Functions executions are named.

The first execution of a run is named after the run, so a second start of the same run is
refused by Step Functions. A long run continues in fresh executions (each with its own
25,000-event history): the n-th is `<run_id>--<n>`, n = 2, 3, ... Run ids never contain
`--`, so the run id is everything before the last one.
"""

SEPARATOR = "--"
# Step Functions execution names: 1-80 characters.
MAX_NAME_LENGTH = 80


def execution_name(run_id: str, n: int = 1) -> str:
    """The name of the `n`-th execution of `run_id` (1 is the first).

    Raises:
        ValueError: `run_id` contains the separator, `n` is below 1, or the name is too long.
    """
    if SEPARATOR in run_id:
        raise ValueError(f"run id {run_id!r} contains {SEPARATOR!r}")
    if n < 1:
        raise ValueError(f"execution number {n} is below 1")
    name = run_id if n == 1 else f"{run_id}{SEPARATOR}{n}"
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"execution name {name!r} is longer than {MAX_NAME_LENGTH} characters")
    return name


def run_id_of(name: str) -> str:
    """The run an execution belongs to, from the execution's name."""
    run_id, separator, number = name.rpartition(SEPARATOR)
    return run_id if separator and number.isdigit() else name
