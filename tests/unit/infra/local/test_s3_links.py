"""Presigned S3 links, checked locally as S3 checks them (`infra/local/s3_links.py`): a link
botocore signed with the runtime's secret reads its object; one edited, signed with any other
secret, unsigned or expired is refused with S3's own error code."""

import datetime

import boto3
import pytest
from botocore.config import Config

from toolpipe.infra.local import s3_links
from toolpipe.infra.local.s3_links import Link, LinkError

NOW = datetime.datetime.now(datetime.UTC)


def _link(key: str, secret: str = s3_links.SECRET, region: str = "us-east-1", **extra: str) -> str:
    s3 = boto3.client(
        "s3",
        region_name=region,
        aws_access_key_id="local",
        aws_secret_access_key=secret,
        aws_session_token="session",
        config=Config(signature_version="s3v4"),
    )
    return str(
        s3.generate_presigned_url(
            "get_object", Params={"Bucket": "inputs", "Key": key, **extra}, ExpiresIn=120
        )
    )


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1"])
def test_a_link_signed_with_the_runtimes_secret_reads_its_object(region: str) -> None:
    assert s3_links.check(_link("inbox/a b+c/é.txt", region=region), NOW) == Link(
        "inputs", "inbox/a b+c/é.txt", None
    )
    versioned = _link("inbox/x.txt", region=region, VersionId="3")
    assert s3_links.check(versioned, NOW) == Link("inputs", "inbox/x.txt", "3")


def test_a_path_style_link_names_its_bucket_in_the_path() -> None:
    s3 = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url="https://s3.amazonaws.com",
        aws_access_key_id="local",
        aws_secret_access_key=s3_links.SECRET,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "inputs", "Key": "inbox/x"}, ExpiresIn=60)
    assert url.startswith("https://s3.amazonaws.com/inputs/")
    assert s3_links.check(url, NOW) == Link("inputs", "inbox/x", None)


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda url: url.replace("inbox/a.txt", "inbox/b.txt"), "SignatureDoesNotMatch"),  # another file
        (lambda url: url.replace("versionId=1", "versionId=2"), "SignatureDoesNotMatch"),  # another version
        (lambda url: url.replace("X-Amz-Expires=120", "X-Amz-Expires=600"), "SignatureDoesNotMatch"),
        (lambda url: url.replace("inputs.s3", "other.s3"), "SignatureDoesNotMatch"),  # another bucket
        (lambda url: url.split("?")[0], "AccessDenied"),  # unsigned
        (
            lambda url: url.replace("X-Amz-Algorithm=AWS4-HMAC-SHA256", "X-Amz-Algorithm=AWS4-HMAC-SHA1"),
            "AccessDenied",
        ),
        (lambda url: url.replace("%2Fs3%2F", "%2Fsqs%2F"), "AuthorizationQueryParametersError"),
    ],
)
def test_an_edited_link_is_refused(edit: object, code: str) -> None:
    url = _link("inbox/a.txt", VersionId="1")
    assert callable(edit)
    with pytest.raises(LinkError) as refused:
        s3_links.check(edit(url), NOW)
    assert refused.value.code == code


@pytest.mark.parametrize("secret", ["FOOBARSECRET", "local", "testing", "tool-runner", ""])
def test_a_link_signed_with_any_secret_a_tool_could_know_is_refused(secret: str) -> None:
    with pytest.raises(LinkError) as refused:
        s3_links.check(_link("inbox/a.txt", secret=secret or "x"), NOW)
    assert refused.value.code == "SignatureDoesNotMatch"


def test_a_link_past_its_expiry_is_refused_as_s3_refuses_it() -> None:
    signed = datetime.datetime.now(datetime.UTC)  # (it signs within a second of this)
    url = _link("inbox/a.txt")  # for 120 s
    assert s3_links.check(url, signed + datetime.timedelta(seconds=100)).key == "inbox/a.txt"
    with pytest.raises(LinkError) as refused:
        s3_links.check(url, signed + datetime.timedelta(seconds=200))
    assert (refused.value.code, refused.value.message) == ("AccessDenied", "Request has expired")


def test_a_link_to_a_host_that_is_not_s3_is_refused() -> None:
    s3 = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url="https://example.com",
        aws_access_key_id="local",
        aws_secret_access_key=s3_links.SECRET,
        config=Config(signature_version="s3v4"),
    )
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "inputs", "Key": "k"}, ExpiresIn=60)
    with pytest.raises(LinkError) as refused:
        s3_links.check(url, NOW)
    assert (refused.value.status, refused.value.code) == (400, "InvalidRequest")
