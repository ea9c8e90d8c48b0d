import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The jsii runtime of aws-cdk-lib and the CDK CLI run `node` from PATH: package.json's Node 22
# (`make install`), as under `make test`, also when pytest is run by hand.
NODE_BIN = Path(__file__).resolve().parents[2] / "node_modules" / ".bin"
if (NODE_BIN / "node").exists() and str(NODE_BIN) not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The synthesized template, cdk-nag included: synthesis raises on any unacknowledged finding."""
    from aws_cdk.assertions import Template

    from toolpipe.infra.cdk.app import build_app

    app, _ = build_app(bundle=False, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    assembly = app.synth()  # once per session: Template.from_stack would synthesize again
    yield Template.from_json(assembly.get_stack_by_name("Toolpipe").template)
