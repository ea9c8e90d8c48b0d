"""S3's answer to a read of a key that is not there, as AWS gives it: it depends on the caller.

AWS: "If the object you request doesn't exist, the error that Amazon S3 returns depends on
whether you also have the s3:ListBucket permission": 404 (`NoSuchKey`, or `NoSuchVersion` for a
version) with it, 403 without, so that a caller who may not list the bucket cannot learn which
keys exist (API reference of GetObject, HeadObject and GetObjectAttributes). moto answers 404
to everyone; `iam.py` asks `hidden` what the caller's role would have seen instead.

A `s3:ListBucket` that holds only under an `s3:prefix` condition is not counted: such a read
carries no `s3:prefix`, and AWS documents no other way for it to apply.
"""

from typing import Any

from botocore.exceptions import ClientError

# The reads AWS documents the rule for.
READS = frozenset({"GetObject", "HeadObject", "GetObjectAttributes"})
# moto's answers for a key (or a version of it) that is not there; a missing bucket is not hidden.
_ABSENT = frozenset({"NoSuchKey", "NoSuchVersion", "404", "NotFound"})


def hidden(operation: str, error: ClientError, may_list: bool) -> ClientError | None:
    """The error AWS answers instead of `error` when the caller may not list the bucket, or None
    when `error` stands (not a read of a missing key, or the caller may list).

    The shapes are botocore's from AWS: a HEAD has no body, so its code is the status, "403"
    ("Forbidden"); a GET's body says `AccessDenied`.
    """
    if may_list or operation not in READS or not _absent(error):
        return None
    if operation == "HeadObject":
        code, message = "403", "Forbidden"
    else:
        code, message = "AccessDenied", "Access Denied"
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {**error.response.get("ResponseMetadata", {}), "HTTPStatusCode": 403},
    }
    return ClientError(response, operation)  # type: ignore[arg-type]


def _absent(error: ClientError) -> bool:
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status == 404 and error.response.get("Error", {}).get("Code") in _ABSENT
