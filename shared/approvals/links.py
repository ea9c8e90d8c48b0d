"""The signed approval link: `{api}/approvals/{id}/page?exp=<unix seconds>&sig=<HMAC>`.

The signature is the credential (the page needs no IAM signature or API key, since a person
opens it from an email): HMAC-SHA256 with a key kept in Secrets Manager over a version tag,
the approval id, the hash of the model's arguments and `exp` (the approval's expiry). So a link
names one approval and one set of arguments, and stops working when the call stops waiting.
Never the task token: it stays server-side. The same key signs the page's CSRF tokens, under
another tag (README "The approval link").
"""

import base64
import hashlib
import hmac
import re
import secrets
from datetime import datetime
from typing import Protocol
from urllib.parse import quote

from toolpipe.shared.approvals.models import Approval
from toolpipe.shared.errors import ToolpipeError

# Changing what is signed changes the tag: links signed the old way then fail closed.
LINK_TAG = "toolpipe-approval-link/v1"
CSRF_TAG = "toolpipe-approval-csrf/v1"
PAGE_PATH = "/approvals/{approval_id}/page"
# What a cookie value and a signature look like (base64url of 32 bytes, no padding).
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9_-]{43}")
EXP_PATTERN = re.compile(r"[0-9]{1,12}")


class LinkInvalidError(ToolpipeError):
    """A link that is not one we signed for this approval and its arguments (403)."""

    def __init__(self) -> None:
        super().__init__("this approval link is not valid")


class LinkExpiredError(ToolpipeError):
    """A link past its `exp`: the call no longer waits (410)."""

    def __init__(self) -> None:
        super().__init__("this approval link has expired: the call no longer waits for a decision")


class SigningKey(Protocol):
    """The HMAC key of approval links, read once per cold start."""

    def get(self) -> bytes: ...


class StaticSigningKey:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def get(self) -> bytes:
        return self._value


class SecretSigningKey:
    """The key in a Secrets Manager secret (the stack generates its value), read through
    Powertools' `get_secret` on first use and kept for the life of the process: links are
    checked on every page view, and the key changes only if someone replaces it."""

    def __init__(self, secret_arn: str) -> None:
        self.secret_arn = secret_arn
        self._value: bytes | None = None

    def get(self) -> bytes:
        if self._value is None:
            # Imported here: building a service must not need boto3 and Powertools first.
            from aws_lambda_powertools.utilities import parameters

            value = parameters.get_secret(self.secret_arn, force_fetch=True)
            key = value if isinstance(value, bytes) else str(value).encode()
            if len(key) < 32:
                raise ValueError(f"the approval signing key in {self.secret_arn} is shorter than 32 bytes")
            self._value = key
        return self._value


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def expiry_seconds(approval: Approval) -> int:
    """`exp` of the approval's link: its expiry, in whole Unix seconds."""
    return int(datetime.fromisoformat(approval.expires_at).timestamp())


class ApprovalLinks:
    def __init__(self, key: SigningKey) -> None:
        self._key = key

    def _mac(self, *parts: str) -> str:
        message = "|".join(parts).encode()
        return _b64(hmac.new(self._key.get(), message, hashlib.sha256).digest())

    def signature(self, approval_id: str, arguments_sha256: str, exp: int) -> str:
        return self._mac(LINK_TAG, approval_id, arguments_sha256, str(exp))

    def url(self, base_url: str, approval: Approval) -> str:
        """The approval's link under the API's base URL (its stage included)."""
        exp = expiry_seconds(approval)
        sig = self.signature(approval.approval_id, approval.link_arguments_sha256, exp)
        path = PAGE_PATH.format(approval_id=quote(approval.approval_id, safe=""))
        return f"{base_url.rstrip('/')}{path}?exp={exp}&sig={sig}"

    def check(self, approval: Approval, exp: str | None, sig: str | None, now: float) -> None:
        """Raise unless `exp` and `sig` are this approval's link, still valid at `now`.
        Compared in constant time; the expiry only after the signature, so a forged `exp`
        is told nothing but "not valid"."""
        if not exp or not sig or not EXP_PATTERN.fullmatch(exp) or not TOKEN_PATTERN.fullmatch(sig):
            raise LinkInvalidError()
        expected = self.signature(approval.approval_id, approval.link_arguments_sha256, int(exp))
        if not hmac.compare_digest(expected, sig):
            raise LinkInvalidError()
        if now >= int(exp):
            raise LinkExpiredError()

    # --- CSRF: a random cookie, and a token derived from it that each form carries ---------

    @staticmethod
    def new_cookie() -> str:
        return _b64(secrets.token_bytes(32))

    def csrf_token(self, approval_id: str, cookie: str) -> str:
        return self._mac(CSRF_TAG, approval_id, cookie)

    def check_csrf(self, approval_id: str, cookie: str | None, token: str | None) -> bool:
        if not cookie or not token or not TOKEN_PATTERN.fullmatch(cookie):
            return False
        return hmac.compare_digest(self.csrf_token(approval_id, cookie), token)
