"""Softmax, log-softmax and cross-entropy in their stable, single-pass forms (rule set
``activation``).

Programs often spell these out: ``log(softmax(x))``, ``exp(x) / sum(exp(x))``, the
max-subtracted forms that ``activation-lowering`` itself produces, or the one-hot form of a
cross-entropy that ``loss-lowering`` produces. The rules recognise them as the one row op,
which is cheaper (one row kernel instead of three or four passes over the data) and at least
as accurate (``log(softmax(x))`` is ``-inf`` where ``softmax`` underflows; ``log_softmax`` is
not), hence ``stable``.
"""

from __future__ import annotations

import numpy as np
from egglog import i64, var

from accy.egraph.sorts import Tensor, parse_type, tensors, types
from rewrites import Theme, has_type, holds, py_int
from rewrites._numeric import parse_ints

activation = Theme("activation", "softmax, log-softmax and cross-entropy forms")

x, lbl = tensors("x lbl")
t, t1, tm, ts, tx, tl, tr, ti, tb, tp, tsc, axes, axes2, sh, data, dt = types(
    "t t1 tm ts tx tl tr ti tb tp tsc axes axes2 sh data dt")
ax = var("ax", i64)


def _single_axis(axes_text: str) -> bool:
    found = parse_ints(axes_text)
    return found is not None and len(found) == 1


def _the_axis(axes_text: str) -> int:
    found = parse_ints(axes_text)
    return found[0] if found else 0


def _one_hot_pick(x_type: str, axis: int, labels: str, column: str, iota: str, iota_type: str,
                  picked_axes: str, mean_axes: str) -> bool:
    """Whether the pieces are loss-lowering's form: labels of shape x.shape[:-1] reshaped to a
    column, compared with arange(classes), picking from log_softmax over the last axis, then
    the mean over every label position."""
    try:
        xt, lt, ct, it = (parse_type(s) for s in (x_type, labels, column, iota_type))
        classes = xt.shape[-1]
        data = np.frombuffer(bytes.fromhex(iota[2:]), dtype=it.dtype.numpy)
        return (axis == xt.rank - 1 and lt.dtype.is_int and lt.shape == xt.shape[:-1]
                and ct.shape == (*lt.shape, 1) and it.dtype is lt.dtype
                and it.shape == (classes,) and np.array_equal(data, np.arange(classes))
                and parse_ints(picked_axes) == (axis,)
                and parse_ints(mean_axes) == tuple(range(lt.rank)))
    except (ValueError, IndexError, TypeError):
        return False


_axis = py_int(_the_axis, axes)

activation.rewrite("log-of-softmax", Tensor.log(Tensor.softmax(x, ax, t1), t),
                   Tensor.log_softmax(x, ax, t), policy="stable",
                   doc="log(softmax(x)) -> log_softmax(x): one row op, no log of 0")
activation.rewrite("exp-of-log-softmax", Tensor.exp(Tensor.log_softmax(x, ax, t1), t),
                   Tensor.softmax(x, ax, t), policy="stable",
                   doc="exp(log_softmax(x)) -> softmax(x)")

_e = Tensor.exp(x, t)
activation.rewrite(
    "softmax-from-exp", Tensor.div(_e, Tensor.reduce_sum(_e, axes, True, ts), t),
    Tensor.softmax(x, _axis, t), holds(_single_axis, axes), policy="stable",
    doc="exp(x) / sum(exp(x)) -> softmax(x) (max-subtracted: no overflow)")
_z = Tensor.sub(x, Tensor.reduce_max(x, axes, True, tm), t)
_ez = Tensor.exp(_z, t)
activation.rewrite(
    "softmax-from-shifted", Tensor.div(_ez, Tensor.reduce_sum(_ez, axes, True, ts), t),
    Tensor.softmax(x, _axis, t), holds(_single_axis, axes), policy="stable",
    doc="exp(x - max) / sum(exp(x - max)) -> softmax(x): one row op")
activation.rewrite(
    "log-softmax-from-logsumexp",
    Tensor.sub(x, Tensor.log(Tensor.reduce_sum(_e, axes, True, ts), ts), t),
    Tensor.log_softmax(x, _axis, t), holds(_single_axis, axes), policy="stable",
    doc="x - log(sum(exp(x))) -> log_softmax(x) (max-subtracted: no overflow)")
activation.rewrite(
    "log-softmax-from-shifted",
    Tensor.sub(_z, Tensor.log(Tensor.reduce_sum(_ez, axes, True, ts), ts), t),
    Tensor.log_softmax(x, _axis, t), holds(_single_axis, axes), policy="stable",
    doc="(x - max) - log(sum(exp(x - max))) -> log_softmax(x): one row op")

_onehot = Tensor.cast(Tensor.eq(Tensor.reshape(lbl, sh, tr), Tensor.constant(data, ti), tb),
                      dt, tx)
_picked = Tensor.reduce_sum(Tensor.mul(Tensor.log_softmax(x, ax, tx), _onehot, tx), axes,
                            False, tp)
activation.rewrite(
    "cross-entropy-from-one-hot", Tensor.neg(Tensor.reduce_mean(_picked, axes2, False, tsc), tsc),
    Tensor.cross_entropy(x, lbl, tsc), has_type(lbl, tl),
    holds(_one_hot_pick, tx, ax, tl, tr, data, ti, axes, axes2),
    policy="stable",
    doc="-mean(sum(log_softmax(x) * onehot(labels))) -> cross_entropy(x, labels)")
