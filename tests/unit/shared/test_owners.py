"""A role's sessions own runs as the role; every other identity owns them as it is."""

import pytest

from toolpipe.shared.owners import owner_of
from toolpipe.shared.settings import ApiSettings, TriggerSettings

ROLE = "arn:aws:iam::123456789012:role/Reports"


@pytest.mark.parametrize(
    ("identity", "owner"),
    [
        ("arn:aws:sts::123456789012:assumed-role/Reports/ecs-task-1f2e", ROLE),
        ("arn:aws:sts::123456789012:assumed-role/Reports/i-0abc123def4567890", ROLE),
        ("arn:aws:sts::123456789012:assumed-role/Reports/jane@example.com", ROLE),
        # A role's ARN with its path names the same role: sessions do not carry the path.
        ("arn:aws:iam::123456789012:role/service/team/Reports", ROLE),
        (ROLE, ROLE),
        (
            "arn:aws-us-gov:sts::123456789012:assumed-role/Reports/s1",
            "arn:aws-us-gov:iam::123456789012:role/Reports",
        ),
        # Unchanged: users, federated users, the root, API keys, authorizers' ids.
        ("arn:aws:iam::123456789012:user/division/bob", "arn:aws:iam::123456789012:user/division/bob"),
        ("arn:aws:sts::123456789012:federated-user/ana", "arn:aws:sts::123456789012:federated-user/ana"),
        ("arn:aws:iam::123456789012:root", "arn:aws:iam::123456789012:root"),
        ("api-key:k7ab3x9q2d", "api-key:k7ab3x9q2d"),
        ("tenant-7", "tenant-7"),
        # Malformed: kept as given, never refused or guessed at.
        ("arn:aws:sts::123456789012:assumed-role/Reports", "arn:aws:sts::123456789012:assumed-role/Reports"),
        (
            "arn:aws:sts::123456789012:assumed-role/Reports/",
            "arn:aws:sts::123456789012:assumed-role/Reports/",
        ),
        (
            "arn:aws:sts::123456789012:assumed-role/Reports/x/y",
            "arn:aws:sts::123456789012:assumed-role/Reports/x/y",
        ),
        ("arn:aws:sts::1234:assumed-role/Reports/s1", "arn:aws:sts::1234:assumed-role/Reports/s1"),
        ("arn:aws:sts::123456789012:assumed-role/Ré/s1", "arn:aws:sts::123456789012:assumed-role/Ré/s1"),
        ("arn:aws:iam::123456789012:role/", "arn:aws:iam::123456789012:role/"),
        ("", ""),
    ],
)
def test_owner_of(identity: str, owner: str) -> None:
    assert owner_of(identity) == owner


def test_the_admin_and_the_trigger_principal_are_owners() -> None:
    env = {"TOOLPIPE_ADMIN_PRINCIPAL": "arn:aws:iam::123456789012:role/platform/Operator"}
    assert ApiSettings.from_env(env).admin_principal == "arn:aws:iam::123456789012:role/Operator"
    env = {"TOOLPIPE_TRIGGER_PRINCIPAL": "arn:aws:sts::123456789012:assumed-role/Reports/deploy"}
    assert TriggerSettings.from_env(env).principal == ROLE
    assert ApiSettings.from_env({}).admin_principal is None
