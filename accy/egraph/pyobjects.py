"""Faster pickling of the plain values egglog's ``PyObject`` sort stores.

egglog (14) keeps every ``PyObject`` value as its ``cloudpickle.dumps`` bytes and unpickles
them where a rule calls Python (``accy.egraph.rules.py_text``, ``py_test``, ``infer_type``):
one match of a rule that computes a type pickles each argument string it wraps and each
result. ``cloudpickle.dumps`` builds a ``CloudPickler`` per call, about ten times the cost of
the standard library's C pickler on a short string, and on the multi-pattern merges of a
NasRNN cell that is a large share of a saturation step (papers/ablation.md).

For the exact built-in types the C pickler writes natively (``str``, ``int``, ``bool``,
``float``, ``bytes``, ``None``), ``CloudPickler`` never calls its overrides (``pickle``'s
documentation of ``reducer_override``), so ``pickle.dumps`` at cloudpickle's protocol gives the
same bytes; :func:`install` routes those values there and everything else to cloudpickle
unchanged. egglog looks ``cloudpickle.dumps`` up at each call, so installing it replaces the
module attribute (once per process; ``installed()`` tells).
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

__all__ = ["dumps", "install", "installed"]

_PLAIN = frozenset({str, int, bool, float, bytes, type(None)})
_cloudpickle_dumps = cloudpickle.dumps


def dumps(obj: Any, protocol: int | None = None, buffer_callback: Any = None) -> bytes:
    """``cloudpickle.dumps(obj, protocol, buffer_callback)``, the same bytes, faster for the
    plain built-in values (module docstring)."""
    if type(obj) in _PLAIN and buffer_callback is None:
        return pickle.dumps(obj, protocol=cloudpickle.DEFAULT_PROTOCOL if protocol is None
                            else protocol)
    return _cloudpickle_dumps(obj, protocol=protocol, buffer_callback=buffer_callback)


def install() -> None:
    """Make ``cloudpickle.dumps`` :func:`dumps` (idempotent)."""
    cloudpickle.dumps = dumps


def installed() -> bool:
    return cloudpickle.dumps is dumps
