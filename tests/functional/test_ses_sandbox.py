"""The local SES sandbox counts a verified domain as SES does (infra/local/service_limits.py):
for every address of it and of its subdomains, the domain written in any case. Its own runtime:
test_service_limits.py spends the sandbox's 200 messages of the day."""

import boto3
import pytest
from botocore.exceptions import ClientError

from toolpipe.infra.local import iam
from toolpipe.infra.local.isolation import FunctionContext, running_as
from toolpipe.infra.local.runtime import EMAIL_SENDER, REGION, LocalRuntime


def test_a_verified_domain_counts_for_its_subdomains_in_any_case() -> None:
    """The sender's domain is verified (as the example's is): AWS delivers to an address of a
    subdomain of it, and to the domain written in capitals; moto matched the exact host only."""
    domain = EMAIL_SENDER.rsplit("@", 1)[-1]
    allowed = {"Effect": "Allow", "Action": "ses:SendEmail", "Resource": "*"}
    mailer = FunctionContext(
        name="mailer",
        environment={},
        policy=iam.Policy("arn:aws:iam::123456789012:role/mailer", ({"Statement": [allowed]},)),
    )

    def send(to: str) -> None:
        boto3.client("ses", region_name=REGION).send_email(
            Source=EMAIL_SENDER,
            Destination={"ToAddresses": [to]},
            Message={"Subject": {"Data": "s"}, "Body": {"Text": {"Data": "b"}}},
        )

    with LocalRuntime(workers=0), running_as(mailer):
        send(f"Ana@{domain.upper()}")
        send(f"team@mail.{domain}")
        with pytest.raises(ClientError) as refused:
            send(f"ana@not{domain}")  # another domain, not a subdomain
    assert refused.value.response["Error"]["Code"] == "MessageRejected"
