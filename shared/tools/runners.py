"""Runners: the Lambda functions tool code runs in, one per trust boundary.

A tool that names none runs in the default runner. One that names a runner (`@tool(runner="mail")`)
runs in that runner's function, under that function's role alone, so a grant for it (an SES
identity, a bucket) reaches no other tool. The stack makes one function per runner it is given
(`ToolPipeline(..., runners=[...])`); the name goes into the function's logical id and name.
"""

import re

# Lowercase letters and digits, a letter first: the name is capitalized into a construct id
# ("mail" -> "ToolRunnerMail"), which CloudFormation's logical ids (alphanumeric) and Lambda's
# function names (64 characters, the stack's name and a hash included) both take.
RUNNER_PATTERN = r"[a-z][a-z0-9]{0,19}"
# What a tool that names no runner runs in; never a name a tool or a stack may give.
DEFAULT_RUNNER = "default"


def runner_name_problem(name: object) -> str | None:
    """Why `name` cannot name a runner, or None when it can."""
    if not isinstance(name, str) or not re.fullmatch(RUNNER_PATTERN, name):
        return (
            f"runner must be 1-20 lowercase letters and digits, a letter first (it names a Lambda "
            f"function), not {name!r}"
        )
    if name == DEFAULT_RUNNER:
        return "runner 'default' is where tools that name none run: leave runner unset"
    return None
