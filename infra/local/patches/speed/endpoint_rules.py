"""A service's endpoint rules are parsed once per process, not once per client.

botocore: each new client builds an `EndpointProvider` from its service's endpoint ruleset, the
JSON its session's loader keeps: every rule, condition and function call parsed into objects,
~12% of making a client here (an S3 client's ruleset, the largest, ~19%). The provider also
keeps the endpoints it resolved, so each new client resolves its first ones again.

Why it matters: a local runtime's functions make their clients at their cold start, in every
runtime (16 by a first run's end), and a project's tests start a runtime per test.

The patch: a provider is kept per ruleset and partitions (the objects of the loader
`shared_loader` keeps for the process, held here so that their ids stay theirs) and excluded
parameters, and every client of that service shares it; the 64 used most recently are kept. A
provider's rules never change once parsed, and an endpoint is a pure function of the parameters
it is resolved for (its cache is keyed by all of them: region, FIPS, dual-stack, a custom
endpoint URL...); botocore already shares one provider between a client's requests, across
threads. A session of another data
path loads other rulesets and gets providers of its own. It is process-wide, like
`shared_loader`: the clients of the user's own tools share the providers too.
"""

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import botocore.regions
from botocore.endpoint_provider import EndpointProvider

CHECKED_WITH = ("5.2.5",)

# Most recently used last. The shared loader's rulesets need one entry per service a process
# calls; a session with a loader of its own (a user's tool may make one) brings new rulesets at
# each client, and each entry holds ~1 MB for S3: the oldest go, as they went with their clients.
KEPT_PROVIDERS = 64
_kept: "OrderedDict[tuple[int, int, frozenset[str]], tuple[Any, Any, Any]]" = OrderedDict()
_lock = threading.Lock()


def kept_provider(
    ruleset_data: Any, partition_data: Any, excluded_params: Iterable[str] | None = None
) -> Any:
    """botocore's `EndpointProvider(...)`, one per ruleset, partitions and excluded parameters."""
    excluded = frozenset(excluded_params or ())
    key = (id(ruleset_data), id(partition_data), excluded)
    with _lock:
        entry = _kept.get(key)
        if entry is None:
            provider = EndpointProvider(
                ruleset_data=ruleset_data, partition_data=partition_data, excluded_params=excluded_params
            )
            entry = _kept[key] = (ruleset_data, partition_data, provider)
            while len(_kept) > KEPT_PROVIDERS:
                _kept.popitem(last=False)
        else:
            _kept.move_to_end(key)
        return entry[2]


def install() -> None:
    # `EndpointRulesetResolver.__init__` reads `EndpointProvider` from its module at each call.
    botocore.regions.EndpointProvider = kept_provider  # type: ignore[attr-defined]  # untyped in the stubs
