""" "Did you mean": the command, option or value closest to a mistyped one, in argparse's error.

Python 3.11's argparse has no `suggest_on_error` (3.14 has): `toolpipe runn` listed every command
and `--agnet` said only that it was not recognized. The closest is found with `difflib`, as
argparse's own suggestions are.
"""

import argparse
import difflib
import re
from collections.abc import Iterable

# argparse's message for a value outside `choices`: the value, then the choices (3.11 quotes
# each with repr, later versions print them bare).
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)$")


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest `word`, if one is near enough to be a typo of it."""
    found = difflib.get_close_matches(word, list(candidates), n=1)
    return found[0] if found else None


def with_choice_hint(message: str) -> str:
    """argparse's error `message`, with the nearest choice when it refuses a value outside them."""
    match = _INVALID_CHOICE.search(message)
    if match is None:
        return message
    choices = [choice.strip().strip("'") for choice in match.group("choices").split(", ")]
    near = closest(match.group("value"), choices)
    return f"{message}: did you mean '{near}'?" if near else message


def unrecognized(extras: list[str], parser: argparse.ArgumentParser, command: str | None) -> str:
    """The error for arguments no parser took, naming the option nearest each unknown one among
    the command's own options and the top-level ones."""
    options = _options(parser)
    sub = _command_parser(parser, command)
    if sub is not None:
        options += _options(sub)
    hints = []
    for extra in extras:
        if extra.startswith("--"):
            near = closest(extra.split("=", 1)[0], options)
            if near is not None:
                hints.append(f"{extra.split('=', 1)[0]}: did you mean {near}?")
    return f"unrecognized arguments: {' '.join(extras)}" + "".join(f"; {hint}" for hint in hints)


def _options(parser: argparse.ArgumentParser) -> list[str]:
    # argparse has no public list of a parser's options (the reference pages read them so too).
    return [option for action in parser._actions for option in action.option_strings]


def _command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return None
