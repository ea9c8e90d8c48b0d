"""IAM statements read one resource at a time: the `@aws-cdk/aws-iam:minimizePolicies` feature flag
(infra/cdk/feature_flags.py) merges statements that grant the same actions into one listing several
resources, which changes the policy's shape, not what it grants."""

from typing import Any


def per_resource(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each statement once per resource it names, with that one resource as its `Resource`."""
    return [
        {**s, "Resource": resource}
        for s in statements
        for resource in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    ]
