"""Lambda layers built with pip on this machine, from lock files: no Docker.

Each layer is installed from its lock (`infra/cdk/layers/*.lock`: every package pinned, with the
hashes of its files), made by `make lock` from the requirement ranges below, resolved for the
Lambda platform (Python 3.14, manylinux2014 aarch64) whatever machine runs it. pip downloads
only wheels for that platform (`--platform manylinux2014_<arch> --only-binary=:all:`) and
refuses any file whose hash the lock does not list (`--require-hashes`). The asset hash is the
lock's bytes: a fix that reaches a lock reaches the deployed layer, and nothing else changes it.
Two layers: `deps` for every function, `model` (openai, ~30 MB, 0.5 s of import) only for the
orchestrator.
"""

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

PYTHON_VERSION = "3.14"
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
_PLATFORM = "manylinux2014_aarch64"
# The same platform as uv names it, for `make lock`.
_UV_PLATFORM = "aarch64-manylinux2014"

DEPS_REQUIREMENTS = [
    "aws-lambda-powertools[tracer]>=3.0",
    "pydantic>=2.7",
    "jsonschema>=4.18",
    "referencing>=0.28",
    "PyYAML>=6",
    "mcp>=2.3,<3",
    "docstring-parser>=0.16",
    "Jinja2>=3.1",
    # Run spans over OTLP/HTTP (shared/telemetry): imported only when an endpoint is set.
    "opentelemetry-sdk>=1.30",
    "opentelemetry-exporter-otlp-proto-http>=1.30",
]
MODEL_REQUIREMENTS = ["openai>=1.40"]
# The Python runtime already has boto3 and what it needs (aws-xray-sdk pulls them in again).
RUNTIME_PROVIDED = [
    "boto3",
    "botocore",
    "s3transfer",
    "jmespath",
    "urllib3",
    "dateutil",
    "python_dateutil",
    "six",
]
# No bytecode: pip would compile it with the interpreter running the synth (3.11 here), whose
# .pyc files Lambda's Python ignores: 14 MB of the 53 MB deps layer, 11 of the 25 MB openai one.
_PIP_BUILD = ["--no-compile"]
# In the deps layer already: not shipped twice.
_MODEL_LAYER_SKIP = ["pydantic", "pydantic_core", "typing_extensions", "annotated_types", "typing_inspection"]


@dataclass(frozen=True)
class Layer:
    """A layer: what toolpipe asks for (`requirements`, ranges), the lock `make lock` resolves
    them to, what is removed after pip (`skip`), and the lock whose pins it must keep for the
    packages both layers hold (`constraints`: one pydantic on the orchestrator, not two)."""

    requirements: list[str]
    lock: Path
    skip: list[str]
    constraints: Path | None = None


@jsii.implements(ILocalBundling)
class PipLayer:
    def __init__(self, locks: Sequence[Path], skip: list[str]) -> None:
        self._locks = list(locks)
        self._skip = skip

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: Any) -> bool:
        install_layer(self._locks, self._skip, Path(output_dir))
        return True


def install_layer(locks: Sequence[Path], skip: list[str], layer_dir: Path) -> None:
    """The layer's contents under `layer_dir/python`, as the deployed layer holds them (also
    what `python -m benchmarks.coldstart` measures): the locks' packages, each file checked
    against the lock's hashes."""
    target = layer_dir / "python"
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--target", str(target), "--platform", _PLATFORM, "--implementation", "cp",
        "--python-version", PYTHON_VERSION, "--only-binary=:all:", "--require-hashes", *_PIP_BUILD,
        *(arg for lock in locks for arg in ("-r", str(lock))),
    ]  # fmt: skip
    subprocess.run(command, check=True)
    for name in skip:
        for path in [*target.glob(name), *target.glob(f"{name}.py"), *target.glob(f"{name}-*.dist-info")]:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def layer_hash(locks: Sequence[Path], skip: list[str]) -> str:
    # The layer's real input is its locks (every pin and file hash) and the platform: hash
    # those, so the hash is known without running pip and changes with every changed pin.
    lock_hashes = [hashlib.sha256(lock.read_bytes()).hexdigest() for lock in locks]
    inputs = [lock_hashes, skip, _PLATFORM, PYTHON_VERSION, *_PIP_BUILD]
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()


def layer_code(locks: Sequence[Path], skip: list[str]) -> lambda_.Code:
    return lambda_.Code.from_asset(
        str(Path(__file__).parent),
        exclude=["**", "!bundling.py"],
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=layer_hash(locks, skip),
        bundling=BundlingOptions(
            image=DockerImage.from_registry("unused-local-bundling"), local=PipLayer(locks, skip)
        ),
    )


LOCKS = Path(__file__).parent / "layers"
# Each layer by the layer's construct id: what the stack builds, what `make lock` resolves and
# what `python -m benchmarks.coldstart` measures.
LAYERS: dict[str, Layer] = {
    "Dependencies": Layer(DEPS_REQUIREMENTS, LOCKS / "deps.lock", RUNTIME_PROVIDED),
    "ModelClient": Layer(
        MODEL_REQUIREMENTS, LOCKS / "model.lock", _MODEL_LAYER_SKIP, constraints=LOCKS / "deps.lock"
    ),
}


def deps_layer_code(requirements_lock: Path | None = None) -> lambda_.Code:
    """Every function's dependencies: toolpipe's lock, and yours (what your tools import; README
    "Dependencies"), installed together."""
    layer = LAYERS["Dependencies"]
    return layer_code([layer.lock, *([requirements_lock] if requirements_lock else [])], layer.skip)


def model_layer_code() -> lambda_.Code:
    layer = LAYERS["ModelClient"]
    return layer_code([layer.lock], layer.skip)


def lock_command(layer: Layer, *, upgrade: bool = False) -> list[str]:
    """uv's command resolving a layer's requirements (read from stdin) to its lock, run in
    `LOCKS`: for Lambda's platform and Python, wheels only, with every file's hash (uv: the
    `lock` extra)."""
    return [
        sys.executable, "-m", "uv", "pip", "compile", "-", "--quiet", "--generate-hashes",
        "--only-binary", ":all:", "--python-platform", _UV_PLATFORM, "--python-version", PYTHON_VERSION,
        "--custom-compile-command", "make lock", "--output-file", layer.lock.name,
        *(["--constraint", layer.constraints.name] if layer.constraints else []),
        *(["--upgrade"] if upgrade else []),
    ]  # fmt: skip


def lock(upgrade: bool = False) -> None:
    """`make lock`: each layer's lock from its requirements, the deps layer's first (the model
    layer keeps its pins). Without `upgrade`, pins that still satisfy the ranges stay."""
    for layer in LAYERS.values():
        command = lock_command(layer, upgrade=upgrade)
        requirements = "\n".join(layer.requirements) + "\n"
        subprocess.run(command, input=requirements, text=True, check=True, cwd=LOCKS)


if __name__ == "__main__":
    lock(upgrade="--upgrade" in sys.argv[1:])
