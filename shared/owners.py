"""Who owns a run: the caller's identity, made as stable as IAM allows.

API Gateway names an IAM caller by the ARN it signed with (`requestContext.identity.userArn`).
For a role that is one session of it, `arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION`, whose
session name changes with each ECS task, each EC2 instance's credentials and each
`RoleSessionName` a caller picks. The owner is the role instead: `arn:PARTITION:iam::ACCOUNT:
role/ROLE`. A session ARN carries no role path, so the owner has none either; a role's name is
unique in its account whatever its path, so nothing is lost, and a role ARN given with a path
(`role/service/ROLE`, as an `admin_principal`) names the same owner.

Anything else is its own owner, unchanged: an IAM user's ARN, a federated user's, the account
root, `api-key:<id>`, a Lambda authorizer's principal id, and any text that is not wholly one of
the two ARN forms above (a malformed ARN is kept as it is, never refused here).
"""

import re

# IAM's own character rules: role names 1-64 of [\w+=,.@-], session names 2-64 of the same, a
# path of printable ASCII between slashes; partitions aws, aws-cn, aws-us-gov, ...
_NAME = r"[\w+=,.@-]"
_SESSION = re.compile(
    rf"arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{{12}}):assumed-role/(?P<role>{_NAME}{{1,64}})/{_NAME}{{2,64}}",
    re.ASCII,
)
_ROLE = re.compile(
    rf"arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{{12}}):role/(?:[\x21-\x7e]*/)?(?P<role>{_NAME}{{1,64}})",
    re.ASCII,
)


def owner_of(identity: str) -> str:
    """The owner `identity` stands for: a role for its sessions and for its ARN with a path,
    itself otherwise."""
    for form in (_SESSION, _ROLE):
        found = form.fullmatch(identity)
        if found is not None:
            return f"arn:{found['partition']}:iam::{found['account']}:role/{found['role']}"
    return identity
