"""The shape of the code: which package may import which, and how complex a function may get.

A package here is a subpackage of `shared/`, `functions/` or `infra/` (`shared.runs`,
`infra.local`...) or a module at their top (`shared.dynamo`). The rules: no two packages import
each other, directly or through others; no function is above radon's C (a cyclomatic complexity
of 20); each package's `__init__` says what it holds. (`shared/` importing neither `infra/` nor
`functions/`: tests/unit/test_boundaries.py.)
"""

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("shared", "functions", "infra")
MAX_COMPLEXITY = 20  # radon's C ends at 20; D starts at 21


def _modules() -> Iterator[tuple[str, Path]]:
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(p for p in parts if p != "__init__"), path


def _package(module: str) -> str | None:
    """`shared.runs.starter` -> `shared.runs`; `shared.messages` -> itself; None if not ours."""
    parts = module.split(".")
    if parts[0] == "toolpipe":
        parts = parts[1:]
    if not parts or parts[0] not in LAYERS:
        return None
    return ".".join(parts[:2])


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _graph() -> dict[str, set[str]]:
    packages = {_package(module) for module, _ in _modules()}
    graph: dict[str, set[str]] = {}
    for module, path in _modules():
        source = _package(module)
        assert source is not None
        targets = graph.setdefault(source, set())
        for name in _imports(path):
            target = _package(name)
            # `from toolpipe.shared import messages` names the module as `shared.messages`.
            if target in packages and target != source:
                targets.add(target)
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        package = todo.pop()
        if package not in seen:
            seen.add(package)
            todo.extend(graph.get(package, ()))
    return seen


def test_no_two_packages_import_each_other() -> None:
    graph = _graph()
    cycles = {
        " <-> ".join(sorted((source, target)))
        for source, targets in graph.items()
        for target in targets
        if source in _reachable(graph, target)
    }
    assert not cycles, sorted(cycles)


def test_the_graph_sees_imports_at_any_depth() -> None:
    """The rules would pass on an empty graph: the graph holds what the code is known to import."""
    graph = _graph()
    assert "shared.runs" in graph["functions.orchestrator"]  # a top-level import
    assert "shared.history" in graph["shared.runs"]
    assert "shared.messages" in graph["shared.history"]  # a module at the top of its layer


def _blocks(blocks: list[Any]) -> Iterator[Any]:
    """Functions, classes, methods and closures, at any depth (as `radon cc` lists them)."""
    for block in blocks:
        yield block
        yield from _blocks(getattr(block, "methods", []))
        yield from _blocks(getattr(block, "closures", []))


def test_no_function_is_above_radon_c() -> None:
    over = [
        f"{path.relative_to(ROOT)}:{block.lineno} {block.name} ({block.complexity})"
        for _, path in _modules()
        for block in _blocks(cc_visit(path.read_text()))
        if block.complexity > MAX_COMPLEXITY
    ]
    assert not over, over


def test_each_package_says_what_it_holds() -> None:
    silent = [
        str(path.relative_to(ROOT))
        for _, path in _modules()
        if path.name == "__init__.py" and not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert not silent, silent
