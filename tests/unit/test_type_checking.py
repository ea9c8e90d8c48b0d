"""mypy reads of aws-cdk-lib only the modules the code imports (pyproject.toml's overrides): a
module left out would be `Any` to mypy, so a call into it would go unchecked. The list and the
code's imports must be the same set."""

import ast
import os
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "aws_cdk"


def _mypy() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    return config


def _followed() -> set[str]:
    """The aws-cdk-lib modules mypy reads: those of the override that follows them."""
    overrides = [o for o in _mypy()["overrides"] if o.get("follow_imports") == "normal"]
    assert len(overrides) == 1, overrides
    modules: list[str] = overrides[0]["module"]
    return set(modules)


def _imported(path: Path) -> set[str]:
    """The aws-cdk-lib modules a file imports (`from aws_cdk import aws_x as x`,
    `import aws_cdk.aws_x`, `from aws_cdk.aws_x import Y`), the package itself included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == PACKAGE:
                # A module of the package, or a name its top level defines (Stack, Duration).
                names += [f"{PACKAGE}.{a.name}" for a in node.names if a.name.startswith("aws_")]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == PACKAGE:
                found.add(".".join(parts[:2]))
                found.add(PACKAGE)
    return found


def _checked_files() -> list[Path]:
    """What mypy checks: its `files`, through the symlinks `toolpipe/` is made of."""
    found: list[Path] = []
    for entry in _mypy()["files"]:
        for folder, _, names in os.walk(ROOT / entry, followlinks=True):
            found += [Path(folder) / name for name in sorted(names) if name.endswith(".py")]
    return found


def test_the_skipping_override_covers_every_cdk_module() -> None:
    skipping = [o for o in _mypy()["overrides"] if o.get("follow_imports") == "skip"]
    assert [o["module"] for o in skipping] == [[f"{PACKAGE}.*"]]


def test_mypy_reads_exactly_the_cdk_modules_the_checked_code_imports() -> None:
    files = _checked_files()
    assert any(path.parts[-2:] == ("cdk", "stack.py") for path in files)  # the stack is among them
    imported = set().union(*map(_imported, files))
    assert f"{PACKAGE}.aws_lambda" in imported  # the walk sees `from aws_cdk import aws_lambda as lambda_`
    assert imported == _followed(), (
        f"not read by mypy: {sorted(imported - _followed())}; listed but not imported: "
        f"{sorted(_followed() - imported)} (pyproject.toml, [[tool.mypy.overrides]])"
    )


def test_the_walk_sees_each_way_of_importing_a_module(tmp_path: Path) -> None:
    code = tmp_path / "x.py"
    code.write_text(
        "from aws_cdk import Stack, aws_ec2 as ec2\n"
        "import aws_cdk.aws_kms\n"
        "from aws_cdk.aws_sqs import Queue\n"
        "from .aws_cdk import aws_iam\n"  # a relative import: not the package
    )
    assert _imported(code) == {PACKAGE, "aws_cdk.aws_ec2", "aws_cdk.aws_kms", "aws_cdk.aws_sqs"}
