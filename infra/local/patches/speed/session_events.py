"""A new botocore session registers its event handlers at the cost of a lookup each.

botocore: each new session registers ~130 built-in handlers, and boto3 a few more. Each
registration checks that the handler takes `**kwargs` by building its signature
(`inspect.getfullargspec`), and translates the event's name through the session's aliases
with a cache that starts empty in every session, and in every client (a client copies its
session's emitter, aliases included). That was ~9 ms of CPU a session, 75% of a client made
from a session of its own, as the functions' cold starts make theirs.

Why it matters: a local runtime's functions start cold in it, and their first run made 29
clients, ~100 ms of CPU; a project's tests start a runtime per test.

The patch: whether a function takes `**kwargs` is kept per function and its code (weakly: a
function that goes away takes its answer with it; a function whose code a reloader swaps in
place is read again; one with a `__signature__` of its own is read each time). A bound
method's answer is its function's: the signature is the same but for `self`. Anything else that
is callable is asked as before. The aliasers that hold botocore's own aliases (`EVENT_ALIASES`)
when they are made, every session's and every client's copy of it, share one cache of
translated names, bounded by the event names the process uses; an aliaser made with other
aliases keeps its own, as before. An aliaser's aliases are never changed once it is made, by
botocore, boto3 or moto: code that changed them would also leave botocore's own cache of that
aliaser stale. It is process-wide, like `shared_loader`: the sessions of the user's own tools
share it too.
"""

import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

import botocore.hooks

CHECKED_WITH = ("5.2.5",)

_original_accepts_kwargs = botocore.hooks.accepts_kwargs
_original_aliaser_init = botocore.hooks.EventAliaser.__init__
_kwargs_of: "weakref.WeakKeyDictionary[Callable[..., Any], tuple[types.CodeType, Any]]" = (
    weakref.WeakKeyDictionary()
)
# Event names as botocore's own aliases translate them: a few hundred names, those the process uses.
_default_aliases_cache: dict[str, str] = {}
_lock = threading.Lock()


def accepts_kwargs(func: Any) -> Any:
    """botocore's `accepts_kwargs` (the signature's `**kwargs` name, or None), kept per function
    and its code: a function whose code is swapped in place (a reloader's) is read again, and one
    that carries a `__signature__` of its own (which may change) is read each time."""
    target = func.__func__ if isinstance(func, types.MethodType) else func
    if not isinstance(target, types.FunctionType) or "__signature__" in target.__dict__:
        return _original_accepts_kwargs(func)
    code = target.__code__
    with _lock:
        kept = _kwargs_of.get(target)
    if kept is not None and kept[0] is code:
        return kept[1]
    answer = _original_accepts_kwargs(target)
    with _lock:
        _kwargs_of[target] = (code, answer)
    return answer


def _aliaser_init(self: Any, event_emitter: Any, event_aliases: Any = None) -> None:
    """botocore's `EventAliaser.__init__`; one that holds botocore's own aliases (a session's, or
    a client's copy of them) shares their cache."""
    _original_aliaser_init(self, event_emitter, event_aliases)
    if self._event_aliases == botocore.hooks.EVENT_ALIASES:
        self._alias_name_cache = _default_aliases_cache


def install() -> None:
    # `botocore.hooks` took `accepts_kwargs` by name.
    botocore.hooks.accepts_kwargs = accepts_kwargs
    botocore.hooks.EventAliaser.__init__ = _aliaser_init  # type: ignore[method-assign]
