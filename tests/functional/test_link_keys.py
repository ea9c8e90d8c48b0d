"""The approval links' signing keys across a rotation, on moto's Secrets Manager (issue 19, item
3): a link names its key (`kid`); the secret's AWSCURRENT version signs and its AWSPREVIOUS one
still verifies; a warm function reads the secret again after `MAX_AGE_SECONDS`, and at once for a
key id it does not know. The clocks are the functions' own, injected: nothing sleeps."""

import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from toolpipe.shared.deferred.links import (
    ApprovalLinks,
    LinkExpiredError,
    LinkInvalidError,
    SecretSigningKey,
    SigningKeyError,
    StaticSigningKey,
    expiry_seconds,
    key_id,
)
from toolpipe.shared.deferred.models import Approval, ApprovalStatus

KEY_A, KEY_B, KEY_C = (c * 64 for c in "abc")
MAX_AGE = SecretSigningKey.MAX_AGE_SECONDS


class Clock:
    """A function's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Secret:
    """The signing key's secret in moto, and how often each reader asked for it."""

    def __init__(self) -> None:
        self.client = boto3.client("secretsmanager", region_name="us-east-1")
        self.arn = self.client.create_secret(Name="approval-signing-key", SecretString=KEY_A)["ARN"]
        self.reads = 0

        def count(**_: Any) -> None:
            self.reads += 1

        self.client.meta.events.register("before-call.secrets-manager.GetSecretValue", count)

    def rotate(self, value: str) -> None:
        # What `aws secretsmanager put-secret-value` does: the new version becomes AWSCURRENT, the
        # one it replaces AWSPREVIOUS.
        self.client.put_secret_value(SecretId=self.arn, SecretString=value)

    def function(self) -> tuple[ApprovalLinks, SecretSigningKey, Clock]:
        """A function's links, as `build_deferred_calls` makes them, on a clock of its own."""
        clock = Clock()
        key = SecretSigningKey(self.arn, clock, self.client)
        return ApprovalLinks(key), key, clock


@pytest.fixture
def secret() -> Iterator[Secret]:
    with mock_aws():
        yield Secret()


def _approval(hours: float = 1) -> Approval:
    now = datetime.now(UTC)
    return Approval(
        approval_id="a" * 32,
        run_id="r1",
        seq=3,
        message_seq=2,
        turn=1,
        call_id="c1",
        tool="wire_money",
        arguments_sha256="1" * 64,
        arguments_preview="{}",
        requester="ana",
        status=ApprovalStatus.PENDING,
        created_at=now.isoformat(timespec="milliseconds"),
        expires_at=(now + timedelta(hours=hours)).isoformat(timespec="milliseconds"),
    )


def _query(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


def _check(links: ApprovalLinks, approval: Approval, query: dict[str, str], now: float | None = None) -> None:
    at = expiry_seconds(approval) - 60 if now is None else now
    links.check(approval, query.get("exp"), query.get("sig"), at, query.get("kid"))


def test_a_rotation_keeps_old_links_until_they_expire_and_new_ones_work_at_once(secret: Secret) -> None:
    orchestrator, _, orchestrator_clock = secret.function()
    api, _, _ = secret.function()
    approval = _approval()
    old = _query(orchestrator.url("https://api.example/v1", approval))
    assert old["kid"] == key_id(KEY_A.encode())
    _check(api, approval, old)

    secret.rotate(KEY_B)
    # A warm orchestrator signs with the key it read until that is MAX_AGE old, then the new one.
    assert _query(orchestrator.url("https://api.example/v1", approval))["kid"] == old["kid"]
    orchestrator_clock.now += MAX_AGE
    new = _query(orchestrator.url("https://api.example/v1", approval))
    assert new["kid"] == key_id(KEY_B.encode()) != old["kid"] and new["sig"] != old["sig"]

    # The API, still warm with only the old key, takes the new link at once (a key id it does not
    # know reads the secret again) and the old link as well (AWSPREVIOUS), until its expiry.
    _check(api, approval, new)
    _check(api, approval, old)
    with pytest.raises(LinkExpiredError):
        _check(api, approval, old, now=expiry_seconds(approval))
    # A link signed before key ids (no `kid`) is checked against the current key only.
    _check(api, approval, {"exp": new["exp"], "sig": new["sig"]})
    with pytest.raises(LinkInvalidError):
        _check(api, approval, {"exp": old["exp"], "sig": old["sig"]})
    # The key id chooses the key, the signature must still be that key's.
    with pytest.raises(LinkInvalidError):
        _check(api, approval, old | {"kid": new["kid"]})


def test_a_second_rotation_ends_the_first_keys_links(secret: Secret) -> None:
    """The overlap is one key deep: rotating twice (what to do when a key may have leaked) leaves
    the first key neither current nor previous, and its links not valid."""
    orchestrator, _, _ = secret.function()
    api, _, api_clock = secret.function()
    approval = _approval()
    old = _query(orchestrator.url("https://api.example/v1", approval))
    _check(api, approval, old)
    secret.rotate(KEY_B)
    secret.rotate(KEY_C)
    _check(api, approval, old)  # not yet: the warm API read its keys less than MAX_AGE ago
    api_clock.now += MAX_AGE
    with pytest.raises(LinkInvalidError):
        _check(api, approval, old)


def test_a_warm_function_sees_a_rotated_key_within_the_max_age(secret: Secret) -> None:
    _, key, clock = secret.function()
    assert (key.get().current, key.get().previous) == (KEY_A.encode(), None)  # never rotated
    assert secret.reads == 2  # AWSCURRENT, and AWSPREVIOUS (none yet)
    secret.rotate(KEY_B)
    clock.now += MAX_AGE - 1
    assert key.get().current == KEY_A.encode() and secret.reads == 2  # cached: no read per link
    clock.now += 1
    ring = key.get()
    assert (ring.current, ring.previous) == (KEY_B.encode(), KEY_A.encode())
    assert secret.reads == 4


def test_a_form_opened_before_a_rotation_still_posts_after_it(secret: Secret) -> None:
    """The page's CSRF token is made with the current key; a form rendered before the rotation
    carries one made with the key that is now the previous one, and is still taken."""
    api, _, clock = secret.function()
    cookie = api.new_cookie()
    token = api.csrf_token("a" * 32, cookie)
    secret.rotate(KEY_B)
    clock.now += MAX_AGE
    assert api.csrf_token("a" * 32, cookie) != token
    assert api.check_csrf("a" * 32, cookie, token)
    assert not api.check_csrf("b" * 32, cookie, token)
    assert not api.check_csrf("a" * 32, cookie, "é" * 43)  # not ASCII: refused, never a TypeError
    # One made by another container that read the new key first: read again, and taken.
    other, _, _ = secret.function()
    secret.rotate(KEY_C)
    assert api.check_csrf("a" * 32, cookie, other.csrf_token("a" * 32, cookie))


def test_made_up_key_ids_are_refused_and_read_the_secret_only_a_few_times(secret: Secret) -> None:
    api, _, clock = secret.function()
    approval = _approval()
    good = _query(api.url("https://api.example/v1", approval))
    reads = secret.reads
    for n in range(50):
        with pytest.raises(LinkInvalidError):
            _check(api, approval, good | {"kid": f"{n:08d}"})
    assert secret.reads - reads == 2 * SecretSigningKey.RELOAD_BURST  # each read: both stages
    for kid in ("", "short", "a" * 9, "../../..", "AAAA AAA", "é" * 8):
        with pytest.raises(LinkInvalidError):
            api.check(approval, good["exp"], good["sig"], expiry_seconds(approval) - 60, kid or "x")
    # Once the window passed, an unknown key id reads the secret again at once.
    clock.now += SecretSigningKey.RELOAD_WINDOW_SECONDS
    reads = secret.reads
    with pytest.raises(LinkInvalidError):
        _check(api, approval, good | {"kid": "ZZZZZZZZ"})
    assert secret.reads - reads == 2


def test_a_key_that_cannot_be_read_fails_closed_and_a_short_previous_one_verifies_nothing(
    secret: Secret,
) -> None:
    api, key, clock = secret.function()
    approval = _approval()
    link = _query(api.url("https://api.example/v1", approval))
    secret.rotate("k" * 31)  # too short to sign with
    clock.now += MAX_AGE
    with pytest.raises(SigningKeyError, match="shorter than 32 bytes"):
        _check(api, approval, link)
    # Fixed: read again once RETRY_SECONDS passed; the short value, now previous, is ignored.
    secret.rotate(KEY_B)
    with pytest.raises(SigningKeyError):
        key.get()  # not before RETRY_SECONDS: a listing of 100 links does not ask 100 times
    clock.now += SecretSigningKey.RETRY_SECONDS
    assert (key.get().current, key.get().previous) == (KEY_B.encode(), None)
    with pytest.raises(LinkInvalidError):
        _check(api, approval, link)  # signed with KEY_A, which is gone
    # A secret that cannot be read at all (deleted) is the same one-line configuration error,
    # and the keys read before are not used in the meantime.
    secret.client.delete_secret(SecretId=secret.arn, ForceDeleteWithoutRecovery=True)
    clock.now += MAX_AGE
    with pytest.raises(SigningKeyError) as raised:
        key.get()
    assert str(raised.value).startswith(f"the approval signing key in {secret.arn} cannot be read: ")
    assert "\n" not in str(raised.value) and KEY_B not in str(raised.value)


def test_a_static_key_ring_verifies_with_either_key() -> None:
    approval = _approval()
    old = ApprovalLinks(StaticSigningKey(KEY_A.encode()))
    both = ApprovalLinks(StaticSigningKey(KEY_B.encode(), previous=KEY_A.encode()))
    link = _query(old.url("https://api.example/v1", approval))
    _check(both, approval, link)
    assert _query(both.url("https://api.example/v1", approval))["kid"] == key_id(KEY_B.encode())
    with pytest.raises(LinkInvalidError):
        _check(ApprovalLinks(StaticSigningKey(KEY_B.encode())), approval, link)
