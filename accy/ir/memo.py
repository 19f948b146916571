"""``memoized``: a method of an immutable object computed once and kept on the object.

For fingerprints of frozen dataclasses (programs, plans, kernels, products): each is asked for
after every pass (stamps, the analysis cache, records), and recomputing one hashes the whole
structure again. The value lives in the instance ``__dict__`` under ``_memo_<name>``; frozen
dataclasses compare, hash and print by their fields only, so nothing else sees it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def memoized[F: Callable[[Any], Any]](method: F) -> F:
    """Wrap a no-argument method of an immutable object so it runs once per instance."""
    key = "_memo_" + method.__name__

    @functools.wraps(method)
    def wrapper(self: Any) -> Any:
        d = self.__dict__
        value = d.get(key)
        if value is None:
            value = method(self)
            object.__setattr__(self, key, value)
        return value

    return wrapper  # type: ignore[return-value]
