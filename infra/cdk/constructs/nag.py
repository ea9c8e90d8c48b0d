"""cdk-nag acknowledgements and checkov skips: each construct accepts its own findings, with the
reason beside it."""

from aws_cdk import Acknowledgment, CfnElement, CfnResource, Stack, Validations
from constructs import Construct, IConstruct

# Reasons several constructs give for the same checkov check, in one place.
SQS_MANAGED_SSE = (
    "False positive: the queue is encrypted at rest with SQS-managed SSE (SqsManagedSseEnabled); "
    "the check only looks for a KMS key."
)
LOGS_ENCRYPTION = (
    "CloudWatch Logs encrypts log data at rest with keys it manages; these logs carry no prompts, tool "
    "payloads or task tokens. A key of ours would add a key policy for the Logs service and KMS charges."
)
NO_VPC = (
    "The function calls AWS APIs and public HTTPS endpoints (the model provider, MCP servers), nothing "
    "inside a VPC; running it in one needs a NAT gateway or an endpoint per service: a deployment's choice."
)
NO_RESERVED_CONCURRENCY = (
    "Reserved concurrency comes out of the account's shared pool, and Lambda refuses a reservation "
    "that leaves under 100 unreserved (new accounts have 10 in all): an account-level sizing choice "
    '(the API and the orchestrator take one when asked: README "Quotas").'
)
ENVIRONMENT_HOLDS_NO_SECRET = (
    "The environment holds names, ARNs and settings, no secret (secrets are read from Secrets "
    "Manager by ARN); Lambda encrypts it at rest with its AWS-managed key."
)
AWS_MANAGED_SECRET_KEY = (
    "Encrypted with the AWS-managed key (aws/secretsmanager), readable only through the grants on "
    "this secret; a customer-managed key is a deployment's choice."
)


def acknowledge(construct: Construct, id: str, reason: str) -> None:
    """A cdk-nag finding accepted on purpose; the reason is the justification reviewers read."""
    Validations.of(construct).acknowledge(Acknowledgment(id=id, reason=reason))


def skip_checkov(construct: IConstruct, id: str, reason: str) -> None:
    """A checkov check (`CKV_AWS_…`) that this resource fails on purpose, or falsely; the reason
    is the justification reviewers read. checkov reads it from the resource's metadata
    (`Metadata.checkov.skip`); `make check-deploy` fails on any failed check not skipped so."""
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    assert isinstance(resource, CfnResource), f"{construct.node.path} has no CloudFormation resource"
    assert reason.strip(), f"skipping {id} on {construct.node.path} needs a reason"
    metadata = resource.get_metadata("checkov") or {}
    skips = [s for s in metadata.get("skip", []) if s["id"] != id]
    resource.add_metadata("checkov", {**metadata, "skip": [*skips, {"id": id, "comment": reason}]})


def logical_id(construct: IConstruct) -> str:
    """The logical id of a construct's CloudFormation resource, as cdk-nag names it in a finding
    (`<LogicalId.Arn>`): findings about a grant on one resource are acknowledged by that id."""
    resource = construct.node.default_child
    assert isinstance(resource, CfnElement), f"{construct.node.path} has no CloudFormation resource"
    return Stack.of(construct).get_logical_id(resource)
