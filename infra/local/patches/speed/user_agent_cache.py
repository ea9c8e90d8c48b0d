"""Each part of botocore's User-Agent header is cleaned once.

botocore: each part of the User-Agent header is cleaned character by character on every
request: a tenth of a local request's time.

Why it matters: it is paid by every request of the runtime, for the same few parts.

The patch: the cleaning function's results are kept per part (it is a pure function of its
text). It is process-wide: the clients of the user's own tools use the kept results too, which
are the same they would compute (README, "The local runtime").
"""

import functools

import botocore.useragent

CHECKED_WITH = ("5.2.5",)


def install() -> None:
    botocore.useragent.sanitize_user_agent_string_component = functools.lru_cache(maxsize=4096)(
        botocore.useragent.sanitize_user_agent_string_component
    )
