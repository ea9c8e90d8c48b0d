"""A new botocore session registers its event handlers at the cost of a lookup each.

botocore: each new session registers ~130 built-in handlers, and boto3 a few more. Each
registration checks that the handler takes `**kwargs` by building its signature
(`inspect.getfullargspec`), and translates the event's name through the session's aliases
with a cache that starts empty in every session, and in every client (a client copies its
session's emitter, aliases included). That was ~9 ms of CPU a session, 75% of a client made
from a session of its own, as the functions' cold starts make theirs.

Why it matters: a local runtime's functions start cold in it, and their first run made 29
clients, ~100 ms of CPU; a project's tests start a runtime per test.

The patch: whether a function takes `**kwargs` is kept per function (weakly: a function that
goes away takes its answer with it). A bound method's answer is its function's: the signature
is the same but for `self`. Anything else that is callable is asked as before. An event name's
alias is kept per set of aliases, in order, shared by every aliaser holding an equal set: it
is a function of the name and the aliases only. It is process-wide, like `shared_loader`: the
sessions of the user's own tools share it too.
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
_kwargs_of: "weakref.WeakKeyDictionary[Callable[..., Any], Any]" = weakref.WeakKeyDictionary()
_alias_caches: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
_lock = threading.Lock()


def accepts_kwargs(func: Any) -> Any:
    """botocore's `accepts_kwargs` (the signature's `**kwargs` name, or None), kept per function."""
    target = func.__func__ if isinstance(func, types.MethodType) else func
    if not isinstance(target, types.FunctionType):
        return _original_accepts_kwargs(func)
    with _lock:
        if target in _kwargs_of:
            return _kwargs_of[target]
    answer = _original_accepts_kwargs(target)
    with _lock:
        _kwargs_of[target] = answer
    return answer


def _aliaser_init(self: Any, event_emitter: Any, event_aliases: Any = None) -> None:
    """botocore's `EventAliaser.__init__`, with the alias cache of its set of aliases."""
    _original_aliaser_init(self, event_emitter, event_aliases)
    aliases = tuple(self._event_aliases.items())
    with _lock:
        self._alias_name_cache = _alias_caches.setdefault(aliases, {})


def install() -> None:
    # `botocore.hooks` took `accepts_kwargs` by name.
    botocore.hooks.accepts_kwargs = accepts_kwargs
    botocore.hooks.EventAliaser.__init__ = _aliaser_init  # type: ignore[method-assign]
