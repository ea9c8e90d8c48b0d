"""What Step Functions refuses at create time and `asl-validator` (npm, 4.0) lets through, or
reports without naming the state: checked on a definition as a dict, offline.

Tried against asl-validator 4.0.0 (2026-11-26): it reports duplicate names anywhere (Map
processors and Parallel branches included), missing `Next`/`Default`/`Catch` targets, a state
nothing transitions to, `Next` with `End`, and a Parallel branch that transitions out of
itself; but it passes a Map processor's state whose `Next` names a state outside the processor
(AWS: MISSING_TRANSITION_TARGET), and states that only transition among themselves with no path
from `StartAt`. It refuses names over 80 characters as "/States ... must NOT have additional
properties", naming neither the state nor the limit. So the rules below overlap it on names
(the gate's one-line reason then names the state) and add the two it misses. It also passes
fields the spec forbids, which the rules on a state's own fields check: `States.ALL` not alone
or not in the last retrier or catcher, a `BackoffRate` under 1.0, `HeartbeatSeconds` not under
`TimeoutSeconds`, a Choice state with `End` or `Next`, and `Next` inside `And`/`Or`/`Not`.

The rules are the States Language's (https://states-language.net/spec.html: state names unique
in the whole state machine, at most 80 Unicode characters; a Map's or Parallel's states form a
graph of their own), which Step Functions applies when a stack creates the state machine.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_NAME_LENGTH = 80


@dataclass(frozen=True)
class Scope:
    """One `StartAt` + `States` graph: the top level, a Map's processor or a Parallel branch.
    A state may only transition to a state of its own scope."""

    path: str
    start_at: str
    states: dict[str, Any]


def problems(definition: dict[str, Any]) -> list[str]:
    """Each way the definition breaks a rule, as a sentence naming the state; empty when none."""
    found: list[str] = []
    seen: dict[str, str] = {}
    for scope in scopes(definition):
        for name in scope.states:
            if name in seen:
                found.append(
                    f"state name {name!r} is used twice ({seen[name]} and {scope.path}): DUPLICATE_STATE_NAME"
                )
            seen.setdefault(name, scope.path)
            if not 1 <= len(name) <= MAX_NAME_LENGTH:
                found.append(
                    f"state name {name[:40]!r}… in {scope.path} has {len(name)} characters (1 to {MAX_NAME_LENGTH})"
                )
        found.extend(_transition_problems(scope))
        for name, state in scope.states.items():
            if isinstance(state, dict):
                found.extend(f"state {name!r} in {scope.path}: {p}" for p in _field_problems(state))
    return found


def _field_problems(state: dict[str, Any]) -> Iterator[str]:
    """The spec's rules on one state's fields that asl-validator 4.0 passes (each tried)."""
    yield from _handler_problems(state)
    timeout, heartbeat = state.get("TimeoutSeconds"), state.get("HeartbeatSeconds")
    if isinstance(timeout, int) and isinstance(heartbeat, int) and heartbeat >= timeout:
        yield f"HeartbeatSeconds {heartbeat} must be smaller than TimeoutSeconds {timeout}"
    if state.get("Type") == "Choice":
        yield from _choice_problems(state)


def _handler_problems(state: dict[str, Any]) -> Iterator[str]:
    for field in ("Retry", "Catch"):
        handlers = [h for h in state.get(field) or [] if isinstance(h, dict)]
        for i, handler in enumerate(handlers):
            errors = handler.get("ErrorEquals") or []
            # "States.ALL ... MUST appear alone in its ErrorEquals array and MUST appear in the
            # last Retrier/Catcher" (the spec's Error names).
            if "States.ALL" in errors and (len(errors) > 1 or i < len(handlers) - 1):
                yield f"States.ALL must be alone in the last of its {field} (at {i})"
            rate = handler.get("BackoffRate")
            if field == "Retry" and isinstance(rate, int | float) and rate < 1.0:
                yield f"BackoffRate {rate} is below 1.0"


def _choice_problems(state: dict[str, Any]) -> Iterator[str]:
    if "End" in state or "Next" in state:
        yield "a Choice state cannot end the execution or name Next (its rules and Default do)"
    for rule in state.get("Choices") or []:
        if isinstance(rule, dict) and any(_nested_next(rule.get(k)) for k in ("And", "Or", "Not")):
            yield "a rule inside And, Or or Not cannot name Next (only a top-level rule does)"


def _nested_next(rules: Any) -> bool:
    nested = rules if isinstance(rules, list) else [rules]
    return any(
        isinstance(r, dict) and ("Next" in r or any(_nested_next(r.get(k)) for k in ("And", "Or", "Not")))
        for r in nested
    )


def scopes(definition: dict[str, Any], path: str = "States") -> Iterator[Scope]:
    """The definition's scopes, the top level first, then nested ones depth first."""
    states = definition.get("States")
    if not isinstance(states, dict):
        return
    yield Scope(path, str(definition.get("StartAt", "")), states)
    for name, state in states.items():
        if not isinstance(state, dict):
            continue
        for key in ("ItemProcessor", "Iterator"):  # Map (Iterator: its older spelling)
            if isinstance(state.get(key), dict):
                yield from scopes(state[key], f"{path}/{name}/{key}")
        for i, branch in enumerate(state.get("Branches") or []):  # Parallel
            if isinstance(branch, dict):
                yield from scopes(branch, f"{path}/{name}/Branches/{i}")


def transitions(state: dict[str, Any]) -> list[str]:
    """The states a state can go to next: `Next`, a Choice's rules and `Default`, a `Catch`."""
    targets = [state.get("Next"), state.get("Default")]
    targets += [rule.get("Next") for rule in state.get("Choices") or [] if isinstance(rule, dict)]
    targets += [catcher.get("Next") for catcher in state.get("Catch") or [] if isinstance(catcher, dict)]
    return [t for t in targets if isinstance(t, str)]


def _transition_problems(scope: Scope) -> list[str]:
    found: list[str] = []
    if scope.start_at not in scope.states:
        found.append(f"StartAt {scope.start_at!r} of {scope.path} is not a state there")
    for name, state in scope.states.items():
        for target in transitions(state) if isinstance(state, dict) else []:
            if target not in scope.states:
                found.append(
                    f"state {name!r} in {scope.path} goes to {target!r}, which is not a state of that "
                    "scope (a Map processor or Parallel branch cannot leave itself): MISSING_TRANSITION_TARGET"
                )
    reached, queue = set(), [scope.start_at]
    while queue:
        name = queue.pop()
        if name in reached or not isinstance(scope.states.get(name), dict):
            continue
        reached.add(name)
        queue.extend(transitions(scope.states[name]))
    found.extend(
        f"state {name!r} in {scope.path} cannot be reached from StartAt {scope.start_at!r}"
        for name in scope.states
        if name not in reached and scope.start_at in scope.states
    )
    return found
