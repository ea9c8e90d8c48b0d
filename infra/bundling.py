"""Lambda layers built with pip on this machine: no Docker.

pip downloads wheels for the Lambda platform (`--platform manylinux2014_<arch>
--only-binary=:all:`), so compiled packages such as pydantic-core match Lambda whatever
machine runs the synth. Two layers: `deps` for every function, `model` (openai, ~30 MB,
0.5 s of import) only for the orchestrator.
"""

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

PYTHON_VERSION = "3.14"
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
_PLATFORM = "manylinux2014_aarch64"

DEPS_REQUIREMENTS = [
    "aws-lambda-powertools[tracer]>=3.0",
    "pydantic>=2.7",
    "jsonschema>=4.18",
    "referencing>=0.28",
    "PyYAML>=6",
    "mcp>=2.3,<3",
    "docstring-parser>=0.16",
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


@jsii.implements(ILocalBundling)
class PipLayer:
    def __init__(self, requirements: list[str], skip: list[str] | None = None) -> None:
        self._requirements = requirements
        self._skip = skip or []

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: Any) -> bool:
        install_layer(self._requirements, self._skip, Path(output_dir))
        return True


def install_layer(requirements: list[str], skip: list[str], layer_dir: Path) -> None:
    """The layer's contents under `layer_dir/python`, as the deployed layer holds them (also
    what `python -m benchmarks.coldstart` measures)."""
    target = layer_dir / "python"
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--target", str(target), "--platform", _PLATFORM, "--implementation", "cp",
        "--python-version", PYTHON_VERSION, "--only-binary=:all:", *_PIP_BUILD, *requirements,
    ]  # fmt: skip
    subprocess.run(command, check=True)
    for name in skip:
        for path in [*target.glob(name), *target.glob(f"{name}.py"), *target.glob(f"{name}-*.dist-info")]:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def layer_hash(requirements: list[str], skip: list[str] | None = None) -> str:
    # The layer's real input is the requirement list and the platform, not files: hash those,
    # so the hash is known without running pip.
    inputs = [requirements, skip, _PLATFORM, PYTHON_VERSION, *_PIP_BUILD]
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()


def layer_code(requirements: list[str], skip: list[str] | None = None) -> lambda_.Code:
    return lambda_.Code.from_asset(
        str(Path(__file__).parent),
        exclude=["**", "!bundling.py"],
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=layer_hash(requirements, skip),
        bundling=BundlingOptions(
            image=DockerImage.from_registry("unused-local-bundling"), local=PipLayer(requirements, skip)
        ),
    )


# Each layer's requirements and what is removed after pip, by the layer's construct id: what
# the stack builds, and what `python -m benchmarks.coldstart` measures.
LAYERS: dict[str, tuple[list[str], list[str]]] = {
    "Dependencies": (DEPS_REQUIREMENTS, RUNTIME_PROVIDED),
    "ModelClient": (MODEL_REQUIREMENTS, _MODEL_LAYER_SKIP),
}


def deps_layer_code(extra: Sequence[str] = ()) -> lambda_.Code:
    """Every function's dependencies: toolpipe's, and `extra` (what your tools import)."""
    requirements, skip = LAYERS["Dependencies"]
    return layer_code([*requirements, *extra], skip)


def model_layer_code() -> lambda_.Code:
    return layer_code(*LAYERS["ModelClient"])
