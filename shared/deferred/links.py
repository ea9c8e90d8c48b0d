"""The signed approval link: `{api}/approvals/{id}/page?exp=<unix seconds>&kid=<key id>&sig=<HMAC>`.

The signature is the credential (the page needs no IAM signature or API key, since a person
opens it from an email): HMAC-SHA256 with a key kept in Secrets Manager over a version tag,
the approval id, the hash of the model's arguments and `exp` (the approval's expiry). So a link
names one approval and one set of arguments, and stops working when the call stops waiting.
`kid` names the key that signed it: the secret's current version signs, and its previous one
still verifies, so a rotation leaves the links already sent working. Never the task token: it
stays server-side. The same keys sign the page's CSRF tokens, under another tag (README "The
approval link").
"""

import base64
import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote

from toolpipe.shared.deferred.models import Approval
from toolpipe.shared.errors import ToolpipeError

# Changing what is signed changes the tag: links signed the old way then fail closed.
LINK_TAG = "toolpipe-approval-link/v1"
CSRF_TAG = "toolpipe-approval-csrf/v1"
# What a key id is an HMAC of (`key_id`).
KID_TAG = "toolpipe-key-id"
PAGE_PATH = "/approvals/{approval_id}/page"
# What a cookie value and a signature look like (base64url of 32 bytes, no padding).
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9_-]{43}")
EXP_PATTERN = re.compile(r"[0-9]{1,12}")
KID_PATTERN = re.compile(r"[A-Za-z0-9_-]{8}")
MIN_KEY_BYTES = 32


class LinkInvalidError(ToolpipeError):
    """A link that is not one we signed for this approval and its arguments (403)."""

    def __init__(self) -> None:
        super().__init__("this approval link is not valid")


class LinkExpiredError(ToolpipeError):
    """A link past its `exp`: the call no longer waits (410)."""

    def __init__(self) -> None:
        super().__init__("this approval link has expired: the call no longer waits for a decision")


class SigningKeyError(ToolpipeError):
    """The signing key cannot be read (no secret, no access) or is too short: a configuration
    error, said in one line. No link is made or accepted until it is fixed; nothing else fails."""


@dataclass(frozen=True)
class KeyRing:
    """The keys a link may be signed with: the secret's current version, which signs, and its
    previous one (None: never rotated), which still verifies, so two keys overlap while links
    signed before a rotation wait in inboxes."""

    current: bytes
    previous: bytes | None = None

    def by_id(self, kid: str) -> bytes | None:
        """The key whose id is `kid` (compared in constant time), or None."""
        found = None
        for key in (self.current, self.previous):
            if key is not None and hmac.compare_digest(key_id(key), kid):
                found = key
        return found

    def all(self) -> tuple[bytes, ...]:
        return (self.current,) if self.previous is None else (self.current, self.previous)


def key_id(key: bytes) -> str:
    """A key's short, non-secret id (`kid` in a link): 8 base64url characters of an HMAC under
    the key itself, so it says nothing about the key and changes with it."""
    return _b64(hmac.new(key, KID_TAG.encode(), hashlib.sha256).digest())[:8]


class SigningKey(Protocol):
    """The HMAC keys of approval links."""

    def get(self) -> KeyRing:
        """The keys as last read (read again once they are older than their max age)."""
        ...

    def reload(self) -> KeyRing:
        """The keys read again now, for a link or token no known key made (a rotation this
        process has not seen yet); at most a few times a minute, whoever asks."""
        ...


class StaticSigningKey:
    def __init__(self, value: bytes, previous: bytes | None = None) -> None:
        self._ring = KeyRing(value, previous)

    def get(self) -> KeyRing:
        return self._ring

    def reload(self) -> KeyRing:
        return self._ring


class SecretSigningKey:
    """The keys in a Secrets Manager secret (the stack generates its value): its `AWSCURRENT`
    version signs, its `AWSPREVIOUS` one still verifies. Read on first use and again once
    `MAX_AGE_SECONDS` old, so a warm function sees a rotation within five minutes; a link with a
    key id this process does not know makes it read again at once (`reload`), so a link the
    rotated orchestrator signed works everywhere as soon as it exists."""

    # How long a warm function keeps the keys it read (README "The approval link").
    MAX_AGE_SECONDS = 300.0
    # After a failed read, the next waits this long: a listing signs up to 100 links, and each
    # must not ask Secrets Manager again for a key it just could not read.
    RETRY_SECONDS = 30.0
    # An unknown key id reads the secret again at once, at most this many times in this window:
    # the first link after a rotation is never kept waiting, and made-up ids cannot turn the page
    # into a stream of Secrets Manager calls.
    RELOAD_BURST = 3
    RELOAD_WINDOW_SECONDS = 30.0

    def __init__(
        self, secret_arn: str, clock: Callable[[], float] = time.monotonic, client: Any = None
    ) -> None:
        self.secret_arn = secret_arn
        self._clock = clock
        self._client = client
        self._ring: KeyRing | None = None
        self._read_at = 0.0
        self._failure: tuple[float, SigningKeyError] | None = None
        self._reloads: list[float] = []
        # Warm invocations may run on threads of one process (the local runtime): one read at a time.
        self._lock = threading.Lock()

    def get(self) -> KeyRing:
        with self._lock:
            if self._ring is not None and self._clock() < self._read_at + self.MAX_AGE_SECONDS:
                return self._ring
            return self._refresh()

    def reload(self) -> KeyRing:
        with self._lock:
            now = self._clock()
            self._reloads = [t for t in self._reloads if now - t < self.RELOAD_WINDOW_SECONDS]
            if self._ring is not None and len(self._reloads) >= self.RELOAD_BURST:
                return self._ring
            self._reloads.append(now)
            return self._refresh()

    def _refresh(self) -> KeyRing:
        if self._failure is not None and self._clock() < self._failure[0]:
            raise self._failure[1]
        try:
            current = self._read("AWSCURRENT")
            if len(current) < MIN_KEY_BYTES:
                raise SigningKeyError(
                    f"the approval signing key in {self.secret_arn} is shorter than {MIN_KEY_BYTES} bytes"
                )
            ring = KeyRing(current, self._previous())
        except SigningKeyError as e:
            # Fails closed: no link is made or accepted until the secret reads again (a key
            # kept from before may be the one someone rotated away from).
            self._ring = None
            self._failure = (self._clock() + self.RETRY_SECONDS, e)
            raise
        self._ring, self._read_at, self._failure = ring, self._clock(), None
        return ring

    def _previous(self) -> bytes | None:
        try:
            key = self._read("AWSPREVIOUS")
        except _NoSuchVersion:
            return None  # never rotated
        # A value too short to sign was replaced: it verifies nothing.
        return key if len(key) >= MIN_KEY_BYTES else None

    def _read(self, stage: str) -> bytes:
        # Imported here: building a service must not need boto3 first.
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        if self._client is None:
            self._client = boto3.client("secretsmanager")
        try:
            answer = self._client.get_secret_value(SecretId=self.secret_arn, VersionStage=stage)
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if stage != "AWSCURRENT" and code == "ResourceNotFoundException":
                raise _NoSuchVersion() from e
            raise SigningKeyError(
                f"the approval signing key in {self.secret_arn} cannot be read: {_one_line(str(e))}"
            ) from e
        except BotoCoreError as e:
            raise SigningKeyError(
                f"the approval signing key in {self.secret_arn} cannot be read: {_one_line(str(e))}"
            ) from e
        value = answer.get("SecretBinary") or answer.get("SecretString") or ""
        return value if isinstance(value, bytes) else str(value).encode()


class _NoSuchVersion(Exception):
    """The secret has no version at that stage (AWSPREVIOUS before the first rotation)."""


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def expiry_seconds(approval: Approval) -> int:
    """`exp` of the approval's link: its expiry, in whole Unix seconds."""
    return int(datetime.fromisoformat(approval.expires_at).timestamp())


class ApprovalLinks:
    def __init__(self, key: SigningKey) -> None:
        self._key = key

    @staticmethod
    def _mac(key: bytes, *parts: str) -> str:
        message = "|".join(parts).encode()
        return _b64(hmac.new(key, message, hashlib.sha256).digest())

    def signature(self, approval_id: str, arguments_sha256: str, exp: int, key: bytes | None = None) -> str:
        """The link's signature under `key` (the current key when None)."""
        return self._mac(key or self._key.get().current, LINK_TAG, approval_id, arguments_sha256, str(exp))

    def url(self, base_url: str, approval: Approval) -> str:
        """The approval's link under the API's base URL (its stage included), signed with the
        current key and naming it (`kid`)."""
        key = self._key.get().current
        exp = expiry_seconds(approval)
        sig = self.signature(approval.approval_id, approval.link_arguments_sha256, exp, key)
        path = PAGE_PATH.format(approval_id=quote(approval.approval_id, safe=""))
        return f"{base_url.rstrip('/')}{path}?exp={exp}&kid={key_id(key)}&sig={sig}"

    def check(
        self, approval: Approval, exp: str | None, sig: str | None, now: float, kid: str | None = None
    ) -> None:
        """Raise unless `exp` and `sig` are this approval's link, still valid at `now`, signed
        with the key `kid` names (the current or the previous one; a link made before key ids,
        without one: the current key only). Compared in constant time; the expiry only after the
        signature, so a forged `exp` is told nothing but "not valid"."""
        if not exp or not sig or not EXP_PATTERN.fullmatch(exp) or not TOKEN_PATTERN.fullmatch(sig):
            raise LinkInvalidError()
        if kid is not None and not KID_PATTERN.fullmatch(kid):
            raise LinkInvalidError()
        key = self._key_for(kid)
        if key is None:
            raise LinkInvalidError()
        expected = self.signature(approval.approval_id, approval.link_arguments_sha256, int(exp), key)
        if not hmac.compare_digest(expected, sig):
            raise LinkInvalidError()
        if now >= int(exp):
            raise LinkExpiredError()

    def _key_for(self, kid: str | None) -> bytes | None:
        ring = self._key.get()
        if kid is None:
            return ring.current
        key = ring.by_id(kid)
        if key is None:
            # Signed after a rotation this process has not read yet (another function, or
            # another container of this one, read it first): read again, at most so often.
            key = self._key.reload().by_id(kid)
        return key

    # --- CSRF: a random cookie, and a token derived from it that each form carries ---------

    @staticmethod
    def new_cookie() -> str:
        return _b64(secrets.token_bytes(32))

    def csrf_token(self, approval_id: str, cookie: str) -> str:
        """Made with the current key; checked against the current and the previous one, so a
        form opened before a rotation still posts after it."""
        return self._mac(self._key.get().current, CSRF_TAG, approval_id, cookie)

    def check_csrf(self, approval_id: str, cookie: str | None, token: str | None) -> bool:
        # Both checked first: `compare_digest` raises on text that is not ASCII.
        if (
            not cookie
            or not token
            or not TOKEN_PATTERN.fullmatch(cookie)
            or not TOKEN_PATTERN.fullmatch(token)
        ):
            return False
        ring = self._key.get()
        if self._csrf_matches(ring, approval_id, cookie, token):
            return True
        # A form another container rendered with a key this one has not read yet.
        fresh = self._key.reload()
        return fresh != ring and self._csrf_matches(fresh, approval_id, cookie, token)

    def _csrf_matches(self, ring: KeyRing, approval_id: str, cookie: str, token: str) -> bool:
        matched = False
        for key in ring.all():
            matched |= hmac.compare_digest(self._mac(key, CSRF_TAG, approval_id, cookie), token)
        return matched
