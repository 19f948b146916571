"""What tracing needs besides the builder: parameter types from a Python function's signature,
and the stack of functions being traced (so ``accy.constant`` and ``accy.arange`` know where
to build their nodes).

Parameter types come from example inputs (arrays or TensorTypes, one per parameter; a
``*args`` parameter takes all the examples after the named ones) or from annotations. An
annotation is a TensorType object (``x: accy.f32[n, n]`` is evaluated when ``def`` runs, so it
may name any variable in scope) or, under ``from __future__ import annotations``, its text,
which is evaluated here in the function's globals, its closure variables and the local
variables of the scope that traced it (where ``n = 8; @accy.function`` writes them).
"""

from __future__ import annotations

import builtins
import contextvars
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import numpy as np

from accy.errors import AccyError
from accy.ir.types import DType, TensorType


class TracingError(AccyError, ValueError):
    """A function cannot be traced as written: a parameter without a type, an annotation that
    does not evaluate to a TensorType, examples that do not fit its parameters, or a builder
    function called outside tracing. A ValueError too, as these were before."""


# the FunctionBuilders being traced, innermost last (a trace inside a traced function nests)
_ACTIVE: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("accy_tracing",
                                                                          default=())


@contextmanager
def active(fb: Any) -> Iterator[None]:
    """Make ``fb`` (a FunctionBuilder) the function that free functions build into."""
    token = _ACTIVE.set((*_ACTIVE.get(), fb))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def current(what: str) -> Any:
    """The innermost function being traced; outside tracing, an error naming ``what``."""
    stack = _ACTIVE.get()
    if not stack:
        raise TracingError(
            f"{what} builds a node of a function being traced, and none is: call it inside a "
            f"function traced by @accy.function or accy.trace (accy.constant and accy.arange "
            f"also take like=<a traced Value> to build into that Value's function; with an "
            f"explicit Builder, use FunctionBuilder.constant)")
    return stack[-1]


def caller_locals(frame: FrameType | None) -> dict[str, Any]:
    """The local variables of ``frame`` (the scope that called the decorator), or none."""
    return dict(frame.f_locals) if frame is not None else {}


def example_type(x: Any) -> TensorType:
    if isinstance(x, TensorType):
        return x
    arr = np.asarray(x)
    return TensorType(arr.shape, DType.from_numpy(arr.dtype))


def _closure(fn: Callable[..., Any]) -> dict[str, Any]:
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    out: dict[str, Any] = {}
    for name, cell in zip(code.co_freevars if code else (), cells, strict=False):
        try:
            out[name] = cell.cell_contents
        except ValueError:  # a cell not yet assigned
            pass
    return out


def _annotation(fn: Callable[..., Any], pname: str, ann: Any,
                scope: dict[str, Any]) -> TensorType:
    """The TensorType ``ann`` stands for (text evaluated in the function's scope)."""
    fname = getattr(fn, "__name__", repr(fn))
    if isinstance(ann, str):
        namespace = {**getattr(fn, "__globals__", {}), **scope, **_closure(fn)}
        try:
            ann = eval(ann, {"__builtins__": builtins, **namespace})  # noqa: S307
        except NameError as exc:
            raise TracingError(
                f"{fname}: the annotation of parameter {pname!r}, {ann!r}, names "
                f"{exc.name!r}, which is not a global, a closure variable or a local variable "
                f"of the scope that traced it; pass example inputs or a TensorType") from None
        except Exception as exc:
            raise TracingError(f"{fname}: the annotation of parameter {pname!r}, {ann!r}, "
                               f"does not evaluate ({type(exc).__name__}: {exc})") from None
    if not isinstance(ann, TensorType):
        raise TracingError(f"{fname}: parameters [{pname!r}] need a TensorType annotation "
                           f"(e.g. accy.f32[4, 8]) or pass example inputs; got {ann!r}")
    return ann


def signature_types(fn: Callable[..., Any], examples: tuple[Any, ...],
                    scope: dict[str, Any]) -> tuple[list[str], list[TensorType]]:
    """Parameter names and types of ``fn``.

    A ``*xs`` parameter becomes parameters ``xs0``, ``xs1``, ... one per example after the
    named ones (it needs examples: its count is not written anywhere else)."""
    fname = getattr(fn, "__name__", repr(fn))
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TracingError(f"{fname}: cannot read its signature ({exc})") from None
    named: list[inspect.Parameter] = []
    star: inspect.Parameter | None = None
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            named.append(p)
        elif p.kind is p.VAR_POSITIONAL:
            star = p
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            raise TracingError(f"{fname}: keyword-only parameter {p.name!r} has no default; "
                               f"traced inputs are positional")
    if star is None and examples and len(examples) != len(named):
        raise TracingError(f"{fname} takes {len(named)} inputs, {len(examples)} examples given")
    if star is not None and not examples:
        raise TracingError(f"{fname} takes *{star.name}: pass example inputs (or TensorTypes) "
                           f"for all its inputs, as the number of {star.name} is not written "
                           f"in its signature")
    if star is not None and len(examples) < len(named):
        raise TracingError(f"{fname} takes {len(named)} named inputs and *{star.name}, "
                           f"{len(examples)} examples given")
    names = [p.name for p in named]
    if star is not None:
        names += [f"{star.name}{i}" for i in range(len(examples) - len(named))]
    if examples:
        return names, [example_type(x) for x in examples]
    bad = [p.name for p in named if p.annotation is p.empty]
    if bad:
        raise TracingError(f"{fname}: parameters {bad} need a TensorType annotation "
                           f"(e.g. accy.f32[4, 8]) or pass example inputs")
    return names, [_annotation(fn, p.name, p.annotation, scope) for p in named]
