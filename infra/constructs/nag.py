"""cdk-nag acknowledgements: each construct accepts its own findings, with the reason beside it."""

from aws_cdk import Acknowledgment, CfnElement, Stack, Validations
from constructs import Construct, IConstruct


def acknowledge(construct: Construct, id: str, reason: str) -> None:
    """A cdk-nag finding accepted on purpose; the reason is the justification reviewers read."""
    Validations.of(construct).acknowledge(Acknowledgment(id=id, reason=reason))


def logical_id(construct: IConstruct) -> str:
    """The logical id of a construct's CloudFormation resource, as cdk-nag names it in a finding
    (`<LogicalId.Arn>`): findings about a grant on one resource are acknowledged by that id."""
    resource = construct.node.default_child
    assert isinstance(resource, CfnElement), f"{construct.node.path} has no CloudFormation resource"
    return Stack.of(construct).get_logical_id(resource)
