import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The synthesized template, cdk-nag included: synthesis raises on any unacknowledged finding."""
    from aws_cdk.assertions import Template

    from toolpipe.infra.app import build_app

    app, _ = build_app(bundle=False, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    assembly = app.synth()  # once per session: Template.from_stack would synthesize again
    yield Template.from_json(assembly.get_stack_by_name("Toolpipe").template)
